"""Forked worker processes that share one list of jobs with this process: the local executor's files.

A report of several files forks its workers as soon as it knows the files, before numpy, the parsers or the
analyzers are imported. Each worker imports them on its own core while this process does the same on its
own (the reading of the thresholds, the cache keys), so the second core works from the start instead of
waiting for this process to finish importing (bench/RESULTS.md, "forked workers").
Then this process and every worker claim the next job from one pipe until it is empty: a file is
decoded, analysed and cached wherever it is claimed, and only its small answer travels (a pickle on the
worker's answer pipe). Nobody waits for anybody else until the end, and big and small files mix freely.

Claiming: the job numbers are written to one pipe as 4-byte records (a writer thread, so that any number
fits the pipe's buffer); a read of 4 bytes from a pipe takes a whole record, since every write is a
multiple of 4 bytes of at most PIPE_BUF (atomic) and every read asks for exactly 4. End of file: no job left.

A worker that cannot start, dies, or answers garbage costs nothing but time: the caller does the jobs it
claimed and never answered at the end, where a bug shows its real traceback, and so the jobs answered
"failed" (a bug in the worker) too.

Only on Linux while this process runs one thread (a fork copies only the calling thread; see
:func:`.parsers.workers.can_fork`); a worker never returns into the caller's code: it ends in ``os._exit``.
"""

from __future__ import annotations

import os
import pickle
import queue
import threading
from typing import Callable, Iterator

from .errors import TracelensError

_RECORD = 4
_HEADER = 8
_CHUNK = 1024           # records per write: 4 KB, at most PIPE_BUF, so each write is atomic


class ForkedPool:
    """``workers`` processes forked now; after :meth:`start` they and this process share ``n_jobs`` jobs.

    ``prepare()`` runs in each worker right after the fork (its imports); ``work(setup, i)`` does job ``i``
    there with the ``setup`` given to :meth:`start` (pickled once). Answers are ``(i, status, payload)``:
    ``ok`` (work's result), ``error`` (a TracelensError, raised by the caller as if found here), ``failed``
    (a bug: the caller does the job itself)."""

    def __init__(self, n_jobs: int, workers: int, prepare: Callable[[], object],
                 work: Callable[[object, int], object]) -> None:
        self.n_jobs = n_jobs
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._pids: list[int] = []
        self._setup_fds: list[int] = []
        self._answer_fds: list[int] = []
        self._live = 0
        self._jobs_r, self._jobs_w = os.pipe()
        for _ in range(workers):
            try:
                setup_r, setup_w = os.pipe()
                answer_r, answer_w = os.pipe()
            except OSError:
                break
            try:
                pid = os.fork()
            except OSError:
                for fd in (setup_r, setup_w, answer_r, answer_w):
                    os.close(fd)
                break
            if pid == 0:                # the child: never returns into the caller's code
                code = 1
                try:
                    for fd in (self._jobs_w, setup_w, answer_r, *self._setup_fds, *self._answer_fds):
                        os.close(fd)
                    _serve(self._jobs_r, setup_r, answer_w, prepare, work)
                    code = 0
                finally:
                    os._exit(code)
            os.close(setup_r)
            os.close(answer_w)
            self._pids.append(pid)
            self._setup_fds.append(setup_w)
            self._answer_fds.append(answer_r)

    @property
    def workers(self) -> int:
        return len(self._pids)

    def start(self, setup) -> None:
        """Give every worker ``setup`` and open the jobs to claiming."""
        data = pickle.dumps(setup, protocol=pickle.HIGHEST_PROTOCOL)
        for fd in self._setup_fds:
            try:
                _write_all(fd, data)
            except OSError:         # that worker is gone: its claims are none
                pass
            os.close(fd)
        self._setup_fds = []
        for fd in self._answer_fds:
            threading.Thread(target=_read_answers, args=(fd, self._answers), daemon=True).start()
        self._live = len(self._answer_fds)
        self._answer_fds = []
        writer = threading.Thread(target=_write_jobs, args=(self._jobs_w, self.n_jobs), daemon=True)
        self._jobs_w = -1       # the writer's now: it closes it once every job is written
        writer.start()

    def claim(self) -> int | None:
        """The next job for this process; None when every job is claimed."""
        return _claim(self._jobs_r)

    def stop(self) -> None:
        """Claim every job left, so that the workers take no new one (they finish the one they hold)."""
        while self.claim() is not None:
            pass

    def ready(self) -> Iterator[tuple[int, str, object]]:
        """The answers that have arrived, without waiting."""
        while True:
            try:
                item = self._answers.get_nowait()
            except queue.Empty:
                return
            answer = self._take(item)
            if answer is not None:
                yield answer

    def rest(self) -> Iterator[tuple[int, str, object]]:
        """Every answer still to come, waiting for each worker to finish (call after claiming all)."""
        while self._live:
            answer = self._take(self._answers.get())
            if answer is not None:
                yield answer

    def _take(self, item):
        if item is None:        # a worker's answers ended (it finished, or died)
            self._live -= 1
            return None
        try:
            i, status, payload = pickle.loads(item)
        except Exception:       # garbage: what it held is missing, and done here
            return None
        if not isinstance(i, int) or not 0 <= i < self.n_jobs or status not in ("ok", "error", "failed"):
            return None
        return i, status, payload

    def close(self) -> None:
        """Stop every worker (killed, if still running) and reap it; idempotent."""
        for fd in (*self._setup_fds, *self._answer_fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self._setup_fds = self._answer_fds = []
        for pid in self._pids:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
        self._pids = []
        for fd in (self._jobs_r, self._jobs_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._jobs_r = self._jobs_w = -1

    def __enter__(self) -> ForkedPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve(jobs: int, setup_fd: int, answer_fd: int, prepare, work) -> None:
    """A worker: imports, waits for the setup, then claims and answers jobs until none is left."""
    prepare()
    with os.fdopen(setup_fd, "rb") as fh:
        data = fh.read()
    if not data:                # the caller needed no worker after all (a cached Report, an error)
        return
    setup = pickle.loads(data)
    while True:
        i = _claim(jobs)
        if i is None:
            break
        try:
            answer = (i, "ok", work(setup, i))
        except TracelensError as exc:
            answer = (i, "error", exc)
        except Exception:       # a bug, or MemoryError: the caller does the job itself
            import traceback    # lazy: only on a failure; this module loads before the fork

            answer = (i, "failed", traceback.format_exc())
        try:
            body = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:       # something unpicklable: the caller does the job itself
            body = pickle.dumps((i, "failed", "the answer could not be pickled"))
        del answer
        _write_all(answer_fd, len(body).to_bytes(_HEADER, "little") + body)
    os.close(answer_fd)


def _claim(fd: int) -> int | None:
    try:
        record = os.read(fd, _RECORD)
    except OSError:
        return None
    if len(record) < _RECORD:
        return None
    return int.from_bytes(record, "little")


def _write_jobs(fd: int, n: int) -> None:
    try:
        for start in range(0, n, _CHUNK):
            _write_all(fd, b"".join(i.to_bytes(_RECORD, "little") for i in range(start, min(n, start + _CHUNK))))
    except OSError:             # closed by close(): the report is over
        return
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _read_answers(fd: int, out: queue.SimpleQueue) -> None:
    """A worker's framed answers, as bytes, into ``out``; None once its stream ends."""
    try:
        with os.fdopen(fd, "rb") as fh:
            while True:
                header = fh.read(_HEADER)
                if len(header) < _HEADER:
                    break
                size = int.from_bytes(header, "little")
                body = fh.read(size)
                if len(body) < size:
                    break
                out.put(body)
    except (OSError, ValueError):
        pass
    finally:
        out.put(None)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
