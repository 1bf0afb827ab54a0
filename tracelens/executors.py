"""Where a report's files are read: files in, each file's result out, in any order.

One small interface, :class:`Executor`, and its two implementations:

- :class:`Local`: this process and the local worker pool (:mod:`.pool`), which it starts as soon as it is
  made, before the caller imports numpy and the analyzers (so that the workers import them on the other
  cores meanwhile). Each side claims the next file and runs the job on it; a worker sends back only the
  result.
- :class:`Dask`: ``dask.distributed`` workers, which read the files themselves (a path every worker sees)
  and send back only the result.

What is run on each file is the caller's :class:`FileJob` (:mod:`.pipeline`'s analysis of a file): this
module knows processes, not traces.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import pool as workers
from .errors import TracelensError, UsageError
from .options import ReportOptions

# The key in a job's memo of what may decode a file beside this process (its ``take(path)`` gives the columns).
DECODING = "decoding"
DASK_HINT = "--executor dask needs dask.distributed: pip install 'tracelens-overlap[dask]'"


@dataclass(frozen=True)
class FileJob:
    """What an executor runs on each file. ``run(path, options, ctx, memo)``: the file's result, a list
    (``memo``: a dict the calls of one process share); ``valid(result)``: whether an answer from another
    process is one (anything else is done here again); ``imports()``: what a local worker imports first,
    while this process does the same. ``run`` and ``imports`` travel to workers by reference: functions
    at the top of a module."""

    run: Callable[[Path, ReportOptions, object, dict], list]
    valid: Callable[[object], bool]
    imports: Callable[[], None] | None = None


@dataclass
class Done:
    """One file read: its result, its size on disk, and where it stands in the input order."""

    index: int
    path: str
    parts: list
    bytes: int


@dataclass
class Tally:
    """How far a report has got, for progress: files, ranks and bytes (on disk) read so far, of how many."""

    files: int
    bytes: int
    files_done: int = 0
    ranks_done: int = 0
    bytes_done: int = 0
    last: str = ""

    def add(self, done: Done) -> Tally:
        self.files_done += 1
        self.ranks_done += len(done.parts)
        self.bytes_done += done.bytes
        self.last = done.path
        return self


OnFile = Callable[[Path, int, int], None]       # before the n-th of total files is read here
OnDone = Callable[[Done], None]                 # after each file, wherever it was read


class Executor:
    """Files in, each file's result out: made with the files, the options and the job (it may start workers
    at once), then :meth:`run` once, then :meth:`close`, which leaves no process behind."""

    def __init__(self, files: list, options: ReportOptions, job: FileJob) -> None:
        self.files, self.options, self.job = files, options, job

    def run(self, ctx, on_file: OnFile | None = None, on_done: OnDone | None = None,
            meanwhile: Callable[[], None] | None = None) -> list[Done]:
        """Every file's :class:`Done`, in any order. ``meanwhile()``: called once every file is handed out,
        while the last ones may still be read elsewhere (what only the end needs, imported beside them)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make(files: list, options: ReportOptions, job: FileJob) -> Executor:
    """The executor ``options.executor`` names (a missing Dask is a usage error, said at once)."""
    if options.executor == "dask":
        if not _dask_installed():
            raise UsageError(DASK_HINT)
        return Dask(files, options, job)
    return Local(files, options, job)


class Local(Executor):
    """This process and the local pool's workers (:func:`.pool.plan`: none for one file or one core)."""

    def __init__(self, files: list, options: ReportOptions, job: FileJob) -> None:
        super().__init__(files, options, job)
        plan = workers.plan(files, options.jobs, beside=True)
        self._pool = workers.Pool(len(files), plan.workers, functools.partial(_local_job, job.run), job.imports,
                                  fork=plan.fork)
        self._plan = plan
        self._halves = None

    @property
    def workers(self) -> int:
        return self._pool.workers

    def run(self, ctx, on_file=None, on_done=None, meanwhile=None) -> list[Done]:
        """Each file read where it is claimed: here or in a worker. An input error is the one reading the
        files in order would give: the first file's that fails. Once one is seen no new file is claimed; the
        files before it that a dead worker held are read here, then the first error is raised."""
        files, pool = self.files, self._pool
        pool.start((files, self.options, ctx, {}))      # each worker's memo its own, once unpickled
        memo: dict = {}
        if self._plan.halves:
            # lazy: the two-core decode of one Kineto file, for such a report only. Forked here, not with the
            # pool: a report the cache answers never gets this far, and the file's analysis is still ahead
            # (numpy and the analyzers to import) while the worker inflates and cuts it.
            from .parsers.kineto import Halves

            self._halves = Halves(Path(files[0]), self.job.imports)
            self._halves.begin()
            memo[DECODING] = self._halves
        done: list[Done] = []
        errors: dict[int, TracelensError] = {}
        answered: set[int] = set()
        here = 0

        def record(i: int, result) -> None:
            answered.add(i)
            done.append(Done(i, str(files[i]), result, size(files[i])))
            if on_done:
                on_done(done[-1])

        def refuse(i: int, exc: TracelensError) -> None:
            answered.add(i)
            errors[i] = exc

        def settle(answers) -> None:
            for i, status, payload in answers:
                # Anything else ("failed", or a payload of the wrong kind) leaves the file to be read here.
                if status == "ok" and self.job.valid(payload):
                    record(i, payload)
                elif status == "error" and isinstance(payload, TracelensError):
                    refuse(i, payload)

        def read_here(i: int) -> None:
            nonlocal here
            here += 1
            if on_file:
                on_file(files[i], here, len(files))
            record(i, self.job.run(files[i], self.options, ctx, memo))

        while (i := pool.claim()) is not None:
            try:
                read_here(i)
            except TracelensError as exc:
                refuse(i, exc)
            settle(pool.ready())
            if errors:
                pool.stop()
                break
        if meanwhile is not None:
            meanwhile()
        settle(pool.rest())
        first = min(errors, default=len(files))
        for i in range(first):
            if i not in answered:       # held by a worker that died, or answered "failed": read here
                read_here(i)
        pool.close()                    # the workers reaped before the caller goes on
        if errors:
            raise errors[first]
        return done

    def close(self) -> None:
        self._pool.close()
        if self._halves is not None:
            self._halves.close()


def _local_job(run, setup, i: int):
    """A local worker's job ``i``: the job's ``run`` on the i-th file."""
    files, options, ctx, memo = setup
    return run(files[i], options, ctx, memo)


class Dask(Executor):
    """``dask.distributed`` workers: ``options.workers`` on a LocalCluster, or the cluster at
    ``options.scheduler``; the client gathers the results as they finish."""

    def run(self, ctx, on_file=None, on_done=None, meanwhile=None) -> list[Done]:
        try:
            # lazy: dask.distributed takes a second to import, and only this executor needs it
            from dask.distributed import Client, LocalCluster, as_completed
        except ImportError:
            raise UsageError(DASK_HINT) from None
        options = self.options
        if options.scheduler:
            cluster, client = None, _connect(Client, options.scheduler)
        else:
            cluster = LocalCluster(n_workers=options.workers or workers.cores(), threads_per_worker=1,
                                   processes=True, dashboard_address=None, silence_logs=50)
            client = Client(cluster)
        try:
            futures = [client.submit(_remote, self.job.run, k, str(f), options, ctx, pure=False)
                       for k, f in enumerate(self.files)]
            done = []
            for future in as_completed(futures):
                done.append(future.result())
                future.release()
                if on_done:
                    on_done(done[-1])
            if meanwhile is not None:
                meanwhile()
            return done
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


def _remote(run, index: int, path: str, options: ReportOptions, ctx) -> Done:
    return Done(index, path, run(path, options, ctx, {}), size(path))


def _connect(client_class, address: str):
    try:
        return client_class(address, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler: {exc}", path=address) from None


def _dask_installed() -> bool:
    """Whether dask.distributed can be imported, without importing it (~1 s)."""
    # lazy: find_spec's machinery, only where Dask is asked for
    import importlib.util

    if "dask.distributed" in sys.modules:
        return sys.modules["dask.distributed"] is not None
    return all(importlib.util.find_spec(name) is not None for name in ("dask", "distributed"))


def size(path) -> int:
    """A file's size on disk (0 when it cannot be read: its reading says why)."""
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0
