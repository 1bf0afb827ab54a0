"""The local worker pool: processes that share one list of jobs with this process. ``load`` gives them Kineto
files to decode (:mod:`.parsers.workers`), ``report`` whole files to decode and analyse (:mod:`.executors`).

Every decision about workers is made here, by :func:`plan`: how many (``TRACELENS_JOBS``, else one per core),
and of which kind. On Linux, while this process runs one thread, a worker is forked: it starts at once with
whatever this process has imported, and a report forks before it imports numpy, so that its workers import
the parsers and analyzers on their own cores while it does the same. Elsewhere (or with threads running: a
fork copies only the calling thread, and a lock another thread holds stays held in the child) a worker is a
fresh interpreter running this module (``python -m tracelens.pool``), which pays for its own start-up and
imports, so it is used only from MIN_BYTES of JSON.

Both kinds serve jobs the same way. The job numbers are written to one pipe as 4-byte records (by a thread,
so that any number of jobs fits the pipe's buffer); this process and every worker claim the next one by
reading 4 bytes, which take a whole record since every write is a multiple of 4 bytes of at most PIPE_BUF
(atomic). End of file: no job left. Nobody waits for anybody until the end, and big and small files mix.
A worker answers each job on its own pipe with a framed pickle ``(job, status, payload)``:

- ``ok``: the job's result;
- ``error``: a TracelensError (bad input), raised by the caller as if found here;
- ``failed``: a bug, or an answer that cannot be pickled: the caller does the job itself, where a bug shows
  its real traceback.

A worker that cannot start, dies, or answers garbage costs nothing but time: what it held is missing, and
the caller does it. No worker outlives :meth:`Pool.close`: each is killed and reaped.
"""

from __future__ import annotations

import os
import pickle
import queue
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from .errors import TracelensError, UsageError

JOBS_ENV = "TRACELENS_JOBS"
SPAWN_ENV = "TRACELENS_SPAWN_WORKERS"     # set: fresh interpreters, never forks (tests and comparisons)
# Below this much Kineto JSON, a fresh interpreter's start-up (numpy too) is not repaid (bench/RESULTS.md,
# "tracelens/pool.py"); a forked worker starts in a millisecond and pays from two files.
MIN_BYTES = 32 << 20
STATUSES = ("ok", "error", "failed")

_RECORD = 4
_HEADER = 8
_CHUNK = 1024           # records per write: 4 KB, at most PIPE_BUF, so each write is atomic


# From this much JSON, the one Kineto file of a report is decoded on two cores (bench/RESULTS.md, "One file
# on two cores"), up to the size the Kineto parser decodes in slices to bound memory (its SLICE_BYTES: the
# pool knows no parser, a test holds the two equal).
HALVES_BYTES = (8 << 20, 64 << 20)


class WorkerPlan(NamedTuple):
    workers: int        # 0: everything is done in this process
    fork: bool          # forked workers, else fresh interpreters
    halves: bool = False    # the one file's events decoded half here, half in a forked worker


def plan(files: list, jobs: int | None = None, *, beside: bool) -> WorkerPlan:
    """The workers for jobs over ``files``. ``jobs`` (or ``TRACELENS_JOBS``) decides when given; otherwise
    one per core, on a machine with a second core and for two files or more. ``beside``: this process does
    jobs too (a report), so it takes one core and one file of the count. One Kineto file of HALVES_BYTES
    (a report's or a load's), on two cores that workers can be forked on (and ``jobs`` not 0), is decoded
    in halves (:mod:`.parsers.kineto.halves`)."""
    if jobs is None:
        jobs = jobs_setting()
    fork = can_fork()
    mine = int(beside)
    if not fork and os.name != "posix":     # a fresh interpreter is handed its pipes by number: POSIX only
        return WorkerPlan(0, fork)
    if jobs is not None and (jobs == 0 or len(files) != 1):
        return WorkerPlan(max(0, min(int(jobs), len(files) - mine)), fork)
    cpus = cores()
    n = min(cpus, len(files)) - mine
    if cpus >= 2 and fork and len(files) == 1 and jobs != 0 and _halves(Path(files[0])):
        return WorkerPlan(0, fork, True)
    if cpus < 2 or len(files) < 2 or n < 1:
        return WorkerPlan(0, fork)
    if not fork and sum(json_bytes(Path(f)) for f in files) < MIN_BYTES:
        return WorkerPlan(0, fork)
    return WorkerPlan(n, fork)


def _halves(path: Path) -> bool:
    """Whether ``path`` is a Kineto trace (JSON, gzipped or not) whose events are worth decoding on two cores:
    HALVES_BYTES of JSON, up to the size the slice decode takes (which bounds memory instead)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
    except OSError:
        return False
    if not (head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"[")):
        return False
    return HALVES_BYTES[0] <= json_bytes(path) <= HALVES_BYTES[1]


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def can_fork() -> bool:
    """Whether workers are forked from this process: on Linux, and only while it runs one thread (a
    notebook's kernel, for one, runs several)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork") or os.environ.get(SPAWN_ENV):
        return False
    return threading.active_count() == 1


def jobs_setting() -> int | None:
    """``TRACELENS_JOBS`` as a number of workers (None: unset); anything else is a usage error."""
    value = os.environ.get(JOBS_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise UsageError(f"{JOBS_ENV} must be a whole number of worker processes (0: none), not {value!r}")
    return int(value)


def json_bytes(path: Path) -> int:
    """Size of the JSON in a trace file; for gzip, the size its trailer records (modulo 4 GiB)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return os.fstat(fh.fileno()).st_size
            fh.seek(-4, os.SEEK_END)
            return max(int.from_bytes(fh.read(4), "little"), os.fstat(fh.fileno()).st_size)
    except OSError:
        return 0


class Pool:
    """``workers`` processes started now (forked when ``fork``, else fresh interpreters); after :meth:`start`
    they and this process share ``n_jobs`` jobs.

    ``prepare()`` runs in each worker once it has started (its imports); ``work(setup, i)`` does job ``i``
    there with the ``setup`` given to :meth:`start` (pickled once). For a fresh interpreter both are pickled,
    so they must be functions at the top of a module. With no worker, :meth:`claim` hands every job to this
    process."""

    def __init__(self, n_jobs: int, workers: int, work: Callable[[object, int], object],
                 prepare: Callable[[], object] | None = None, fork: bool = True) -> None:
        self.n_jobs = n_jobs
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._early: dict[int, tuple[str, object]] = {}
        self._procs: list = []          # pids of forked workers, Popen objects of fresh interpreters
        self._setup_fds: list[int] = []
        self._answer_fds: list[int] = []
        self._live = 0
        self._next = 0
        self._threads: list[threading.Thread] = []
        self._jobs_r = self._jobs_w = -1
        if workers < 1:
            return
        self._jobs_r, self._jobs_w = os.pipe()
        start = self._fork if fork else self._spawn
        for _ in range(workers):
            try:
                setup_r, setup_w = os.pipe()
                answer_r, answer_w = os.pipe()
            except OSError:
                break
            proc = start(setup_r, setup_w, answer_r, answer_w, prepare, work)
            os.close(setup_r)
            os.close(answer_w)
            if proc is None:
                os.close(setup_w)
                os.close(answer_r)
                break
            self._procs.append(proc)
            self._setup_fds.append(setup_w)
            self._answer_fds.append(answer_r)
        if not self._procs:             # none started: every job is this process's
            for fd in (self._jobs_r, self._jobs_w):
                os.close(fd)
            self._jobs_r = self._jobs_w = -1

    def _fork(self, setup_r, setup_w, answer_r, answer_w, prepare, work):
        try:
            pid = os.fork()
        except OSError:
            return None
        if pid == 0:                    # the child: never returns into the caller's code
            code = 1
            try:
                for fd in (self._jobs_w, setup_w, answer_r, *self._setup_fds, *self._answer_fds):
                    os.close(fd)
                _serve(self._jobs_r, setup_r, answer_w, prepare, work)
                code = 0
            finally:
                os._exit(code)
        return pid

    def _spawn(self, setup_r, setup_w, answer_r, answer_w, prepare, work):
        # lazy: only where workers are fresh interpreters (a few ms of every other report)
        import subprocess

        # This very tracelens first on the path, whatever the working directory holds.
        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONSAFEPATH": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        fds = (self._jobs_r, setup_r, answer_w)
        try:
            proc = subprocess.Popen([sys.executable, "-m", __name__, *map(str, fds)], pass_fds=fds, env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        except (OSError, ValueError):
            return None
        try:
            _write_all(setup_w, pickle.dumps((prepare, work), protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:                 # it died at once: it claims nothing
            pass
        return proc

    @property
    def workers(self) -> int:
        return len(self._procs)

    def start(self, setup) -> None:
        """Give every worker ``setup`` and open the jobs to claiming."""
        if not self._procs:
            return
        data = pickle.dumps(setup, protocol=pickle.HIGHEST_PROTOCOL)
        for fd in self._setup_fds:
            try:
                _write_all(fd, data)
            except OSError:         # that worker is gone: its claims are none
                pass
            os.close(fd)
        self._setup_fds = []
        for fd in self._answer_fds:
            self._threads.append(threading.Thread(target=_read_answers, args=(fd, self._answers), daemon=True))
            self._threads[-1].start()
        self._live = len(self._answer_fds)
        self._answer_fds = []
        writer = threading.Thread(target=_write_jobs, args=(self._jobs_w, self.n_jobs), daemon=True)
        self._jobs_w = -1       # the writer's now: it closes it once every job is written
        self._threads.append(writer)
        writer.start()

    def claim(self) -> int | None:
        """The next job for this process; None when every job is claimed."""
        if self._jobs_r < 0:
            if self._next >= self.n_jobs:
                return None
            self._next += 1
            return self._next - 1
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

    def answer(self, i: int) -> tuple[str, object] | None:
        """Job ``i``'s (status, payload), waiting for it, for a caller that takes answers in its own order
        and claims none; None once no worker will give it (it died holding it)."""
        while i not in self._early and self._live:
            answer = self._take(self._answers.get())
            if answer is not None:
                self._early[answer[0]] = answer[1:]
        return self._early.pop(i, None)

    def _take(self, item):
        if item is None:        # a worker's answers ended (it finished, or died)
            self._live -= 1
            return None
        try:
            i, status, payload = pickle.loads(item)
        except Exception:       # garbage: what it held is missing, and done here
            return None
        if not isinstance(i, int) or not 0 <= i < self.n_jobs or status not in STATUSES:
            return None
        return i, status, payload

    def close(self) -> None:
        """Stop every worker (killed, if still running) and reap it; idempotent."""
        for fd in (*self._setup_fds, *self._answer_fds, self._jobs_r, self._jobs_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._setup_fds = self._answer_fds = []
        self._jobs_r = self._jobs_w = -1
        self._next = self.n_jobs        # nothing left to claim here either
        for proc in self._procs:
            _end(proc)
        self._procs = []
        self._early.clear()
        # Each thread ends once its pipe does (the workers are gone): joined, so that this process runs one
        # thread again when close returns and the next pool may fork (can_fork).
        for t in self._threads:
            t.join(timeout=5)
        self._threads = []

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _end(proc) -> None:
    if isinstance(proc, int):
        try:
            os.kill(proc, 9)
        except OSError:
            pass
        try:
            os.waitpid(proc, 0)
        except OSError:
            pass
        return
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _serve(jobs: int, setup_fd: int, answer_fd: int, prepare=None, work=None) -> None:
    """A worker: imports, waits for the setup, then claims and answers jobs until none is left. A fresh
    interpreter is sent ``prepare`` and ``work`` first, on the setup pipe."""
    with os.fdopen(setup_fd, "rb") as fh:
        if work is None:
            prepare, work = pickle.load(fh)
        if prepare is not None:
            prepare()
        try:
            setup = pickle.load(fh)
        except EOFError:        # the caller needed no worker after all (a cached Report, an error)
            return
    while True:
        i = _claim(jobs)
        if i is None:
            break
        try:
            answer = (i, "ok", work(setup, i))
        except TracelensError as exc:
            answer = (i, "error", exc)
        except Exception:       # a bug, or MemoryError: the caller does the job itself
            # lazy: linecache and tokenize, paid only on a failure
            import traceback

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


def main(argv: list[str]) -> None:
    """A fresh interpreter's life: the three pipes it was handed (jobs, setup, answers), served until no job
    is left; then it ends at once (no teardown: what the last job left is reclaimed by the exit)."""
    code = 1
    try:
        jobs, setup, answers = map(int, argv)
        _serve(jobs, setup, answers)
        code = 0
    finally:
        os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
