"""Kineto decode workers: decode trace files in other processes while this one does something else.

A report (``tracelens report``, ``api.report``) uses these only where it cannot fork: on Linux it shares its
files with forked workers that analyse them whole (:mod:`tracelens.forked`). ``api.load``, which hands back
whole RankTraces, uses them everywhere.

Decoding a Kineto trace (gunzip, JSON, columns; :mod:`.kineto.decode`) needs numpy and msgspec. With
several trace files the workers decode them in parallel while this process assembles and analyses the ones
already decoded. One file is decoded here: nothing would run beside its worker, and sending its columns
back costs more than the worker's start saves (bench/RESULTS.md, "decode workers").

On Linux, while this process runs a single thread, workers are forked from it once the decoder is
imported: a child starts with numpy loaded at almost no cost, so even a few small files are worth it.
Elsewhere, or with threads running (a notebook's kernel), they are fresh interpreters (``sys.executable``),
which must import numpy first and are used only from MIN_BYTES of JSON. Either kind reads its files and
writes one pickled answer per file, in order. A worker that cannot start, dies or answers garbage costs
nothing but time: the file is decoded here instead (where a bug shows its real traceback). An InputError a
worker finds is raised here exactly as if it had been found here.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from collections import deque
from pathlib import Path

from .._speed import exit_without_teardown
from ..errors import TracelensError, UsageError

JOBS_ENV = "TRACELENS_JOBS"
# Below this much Kineto JSON a fresh interpreter's start-up (numpy too) is not repaid (bench/RESULTS.md,
# "decode workers").
MIN_BYTES = 32 << 20
SPAWN_ENV = "TRACELENS_SPAWN_WORKERS"     # set: fresh interpreters, never forks (tests and comparisons)


def jobs_for(files: list[Path], jobs: int | None = None) -> int:
    """How many decode workers to start for ``files`` (0: decode in this process).

    ``jobs`` (or ``TRACELENS_JOBS``) decides when given. Otherwise, on a machine with a second core and
    for two files or more: one forked worker per core (:func:`can_fork`), else one fresh interpreter per
    core when the files hold at least MIN_BYTES of JSON.
    """
    if jobs is None:
        jobs = jobs_setting()
    if jobs is not None:
        return max(0, min(int(jobs), len(files)))
    cpus = cores()
    if cpus < 2 or len(files) < 2:
        return 0
    if can_fork():
        return min(cpus, len(files))
    if sum(_json_bytes(f) for f in files) < MIN_BYTES:
        return 0
    return min(cpus, len(files))


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def can_fork() -> bool:
    """Whether workers are forked from this process rather than started afresh: on Linux, and only while
    this process runs one thread (a fork copies only the calling thread, and a lock another thread holds
    would stay held in the child; a notebook's kernel, for one, runs several)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork") or os.environ.get(SPAWN_ENV):
        return False
    return threading.active_count() == 1


def jobs_setting() -> int | None:
    """``TRACELENS_JOBS`` as a number of workers (None: unset); anything else is a usage error, reported
    whether or not this report decodes anything."""
    value = os.environ.get(JOBS_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise UsageError(f"{JOBS_ENV} must be a whole number of worker processes (0: none), not {value!r}")
    return int(value)


def _json_bytes(path: Path) -> int:
    """Size of the JSON in a trace file; for gzip, the size its trailer records (modulo 4 GiB)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return os.fstat(fh.fileno()).st_size
            fh.seek(-4, os.SEEK_END)
            return max(int.from_bytes(fh.read(4), "little"), os.fstat(fh.fileno()).st_size)
    except OSError:
        return 0


class _Worker:
    def __init__(self) -> None:
        self.pending: deque[Path] = deque()
        self.broken = False
        # The package root first, so the worker imports this very tracelens whatever the cwd holds.
        import subprocess       # lazy: only where workers are fresh interpreters, not before every fork

        root = str(Path(__file__).resolve().parents[2])
        code = f"import sys; sys.path.insert(0, {root!r}); from tracelens.parsers.workers import serve; serve()"
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL)
        except OSError:
            self.proc, self.broken = None, True

    def send(self, path: Path) -> bool:
        if self.broken:
            return False
        try:
            pickle.dump(str(path), self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        except OSError:
            self.broken = True
            return False
        self.pending.append(path)
        return True

    def done_sending(self) -> None:
        if not self.broken:
            try:
                self.proc.stdin.close()   # the worker exits after its last answer
            except OSError:
                self.broken = True

    def receive(self):
        return _receive(self, self.proc.stdout)

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.proc.wait()


def _receive(worker, stream):
    """A worker's next answer from ``stream``, or None once it is broken."""
    if worker.broken:
        return None
    try:
        return pickle.load(stream)
    except Exception:  # EOF, a killed worker, a truncated pickle: decode locally from here on
        worker.broken = True
        return None


class _Forked:
    """A worker forked from this process once the decoder is imported: it starts with numpy and msgspec
    loaded (where a fresh interpreter must import them), decodes the files it was given, in order, and
    answers each on a pipe."""

    def __init__(self, files: list[Path]) -> None:
        from .kineto import decode_file  # noqa: F401  # lazy: numpy, msgspec: loaded here, just before this fork

        self.pending: deque[Path] = deque(files)
        self.broken, self.pid, self.stream = False, None, None
        try:
            r, w = os.pipe()
        except OSError:
            self.broken = True
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            self.broken = True
            return
        if pid == 0:                    # the child: never returns into the caller's code
            code = 1
            try:
                os.close(r)
                _answer(list(files), os.fdopen(w, "wb"))
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self.stream = pid, os.fdopen(r, "rb")

    def receive(self):
        return _receive(self, self.stream)

    def close(self) -> None:
        if self.pid is None:
            return
        try:
            os.kill(self.pid, 9)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        self.stream.close()
        self.pid = None


def _answer(paths: list, out) -> None:
    """Decode ``paths`` in order and write one pickled answer each to ``out``: ("ok", KinetoColumns) |
    ("error", InputError) | ("failed", traceback text). The last file's decoded events are parked, not
    freed: the worker exits right after, without freeing them one by one."""
    from .kineto import decode_file    # lazy: numpy and msgspec; this module loads before the report's fork

    parked: list = []
    for k, path in enumerate(paths):
        try:
            answer = ("ok", decode_file(Path(path), keep_alive=parked if k == len(paths) - 1 else None))
        except TracelensError as exc:
            answer = ("error", exc)
        except Exception:  # a bug, or MemoryError: the caller decodes the file itself
            import traceback    # lazy: only on a failure; a fresh worker's start stays small

            answer = ("failed", traceback.format_exc())
        pickle.dump(answer, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()
        del answer
    out.close()


class DecodePool:
    """Workers decoding ``files`` (assigned round-robin); :meth:`take` hands out each file's columns."""

    def __init__(self, files: list[Path], jobs: int) -> None:
        self._owner: dict[Path, object] = {}
        self._early: dict[Path, object] = {}
        jobs = max(1, jobs)
        if can_fork():
            self._workers = [_Forked(files[k::jobs]) for k in range(jobs) if files[k::jobs]]
            for worker in self._workers:
                for f in worker.pending:
                    self._owner[f] = worker
            return
        self._workers = [_Worker() for _ in range(jobs)]
        for i, f in enumerate(files):
            worker = self._workers[i % len(self._workers)]
            if worker.send(f):
                self._owner[f] = worker
        for worker in self._workers:
            worker.done_sending()

    def take(self, path: Path):
        """The decoded columns of ``path``; None when this process should decode it itself. Raises the
        InputError the worker found."""
        if path in self._early:
            return _unpack(self._early.pop(path))
        worker = self._owner.pop(path, None)
        if worker is None:
            return None
        while worker.pending:
            head = worker.pending.popleft()
            answer = worker.receive()
            if head == path:
                return _unpack(answer)
            self._early[head] = answer  # asked out of order: keep it for its own take()
        return None

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
        self._early.clear()

    def __enter__(self) -> DecodePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _unpack(answer):
    if not isinstance(answer, tuple) or len(answer) != 2:
        return None
    status, payload = answer
    if status == "error":
        raise payload
    return payload if status == "ok" else None


def serve() -> None:
    """A fresh interpreter's main loop: pickled paths in (all sent at once, then EOF), and for each a
    pickled answer out (:func:`_answer`)."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)            # anything printed must not corrupt the answer stream
    sys.stdout = sys.stderr
    requests = []
    while True:
        try:
            requests.append(pickle.load(sys.stdin.buffer))
        except EOFError:
            break
    _answer(requests, answers)
    exit_without_teardown(0)     # the last file's events were parked, not freed: the exit reclaims them
