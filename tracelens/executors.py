"""A report file by file: each file is parsed, its ranks analysed, and its tables dropped before the next.

Peak memory then follows the largest file (times the decode workers, or the Dask workers), not the rank
count: all that stays of a rank is its :class:`~.analyzers.RankAnalysis` and a :class:`Part` of metadata.
What needs every rank is settled from those once all files are read, exactly as :func:`.parsers.load_files`
settles whole traces:

- a rank recorded nowhere (trace, environment, file name) is analysed under a stand-in number and renumbered
  by input order afterwards (:meth:`RankAnalysis.renumber`); in a run directory whose manifest may give it
  an environment or an NCCL log by that number, its file is read again under its final rank;
- a rank claimed twice inside one file is warned about there (across files it is two runs, refused);
- several runs are refused by :func:`.parsers.runs.check_one_run`, from each rank's metadata and first event.

``local`` shares the files between this process and workers forked at the report's start (:mod:`.forked`):
each side claims the next file and runs :func:`analyze_file` on it, and a worker sends back only its Parts.
Where no fork is possible (not Linux, or threads running) it reads the files here, the Kineto decode workers
of :mod:`.parsers.workers` (fresh interpreters) decoding ahead. ``dask`` runs :func:`analyze_file` on
``dask.distributed`` workers, which read the files themselves (a path every worker sees) and send back only
Parts.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from . import cache as warm
from .errors import TracelensError, UsageError
from .parsers import (cache_options, describe_skipped, number_by_order, parse_file, rank_unknown, rundir,
                      start_decoding)
from .parsers import workers as decode_workers

if TYPE_CHECKING:  # pragma: no cover
    from .analyzers import Context, RankAnalysis
    from .contract import Report
    from .model.meta import RunMeta

EXECUTORS = ("local", "dask")
STAND_IN = -1          # the rank an unnumbered trace is analysed under until every file's ranks are known
DASK_HINT = "--executor dask needs dask.distributed: pip install 'tracelens-overlap[dask]'"


@dataclass
class Part:
    """One rank of one file once analysed: its metadata (no tables), its first event, its analysis.

    ``numbered``: the rank is recorded nowhere and gets its number by input order; ``meta_warnings``: how
    many of the analysis' warnings came from the trace's metadata (where a settled rank's note goes)."""

    meta: RunMeta
    first_ns: int | None
    analysis: RankAnalysis
    numbered: bool
    meta_warnings: int


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


@dataclass
class Done:
    """One file read: its Parts, its size on disk, and where it stands in the input order."""

    index: int
    path: str
    parts: list[Part]
    bytes: int


def analyze_file(path, comm_patterns: tuple[str, ...], step_pattern: str | None, ctx: Context, pool=None,
                 ranks: dict[int, int] | None = None, cache: bool = False, stamps: dict | None = None
                 ) -> list[Part]:
    """The Parts of one trace file; each trace is released once analysed. ``ranks``: the numbers of this
    file's unnumbered traces by their position in it (a second reading, once every rank is known);
    ``cache``: read and fill the warm cache (:mod:`.cache`): the file's Parts when it was analysed the same
    way before, else its parsed tables; ``stamps``: the run directories' side files, looked at once a
    report (see :func:`analysis_options`)."""
    before = None
    if cache:
        options = analysis_options(path, comm_patterns, step_pattern, ctx, ranks, stamps)
        before = warm.analysis_key(Path(path), options)
        hit = warm.get_analysis(Path(path), options, before) if before is not None else None
        if hit is not None:
            return hit
    parts = _analyze_file(path, comm_patterns, step_pattern, ctx, pool, ranks, cache)
    if before is not None:
        warm.put_analysis(Path(path), options, parts, before)
    return parts


def analysis_options(path, comm_patterns, step_pattern, ctx: Context, ranks: dict[int, int] | None,
                     stamps: dict | None = None) -> tuple:
    """Everything besides the file and the code that decides its Parts: the parse options, the thresholds,
    the ranks given to unnumbered traces, and the run directory's manifest and NCCL logs (``stamps``: by
    folder, filled here; a thousand traces of one run directory share them)."""
    folder = Path(path).parent
    stamps = {} if stamps is None else stamps
    if folder not in stamps:
        stamps[folder] = rundir.stamp(folder)
    # The same for every file of a report (the thresholds' repr alone is 2 KB): made once.
    common = ("options", tuple(comm_patterns), step_pattern, id(ctx))
    if common not in stamps:
        stamps[common] = (*cache_options(tuple(comm_patterns), step_pattern), repr(ctx))
    return (*stamps[common], tuple(sorted(ranks.items())) if ranks else None, stamps[folder])


def _analyze_file(path, comm_patterns, step_pattern, ctx, pool, ranks, cache) -> list[Part]:
    # lazy: numpy and the analyzers, after the fork; runs.py is not needed before it either
    from .analyzers import analyze_rank
    from .parsers import runs

    traces = parse_file(Path(path), tuple(comm_patterns), step_pattern, pool, cache=cache)
    for k, t in enumerate(traces):
        if t.meta.rank is None and ranks and k in ranks:
            number_by_order(t.meta, ranks[k])
    claimed = Counter(t.meta.rank for t in traces if t.meta.rank is not None)
    for t in traces:
        if t.meta.rank is not None and claimed[t.meta.rank] > 1:
            # Across files that is two runs, refused once every file is read.
            t.meta.warnings.add("duplicate-rank", f"{claimed[t.meta.rank]} traces claim rank {t.meta.rank}")
    parts = []
    traces.reverse()
    while traces:           # the list lets go of each trace once it is analysed
        t = traces.pop()
        numbered = t.meta.rank is None
        if numbered:
            t.meta.rank = STAND_IN
        else:
            rundir.attach([t])
        first, held = runs.first_event_ns(t), len(t.meta.warnings)
        analysis = analyze_rank(t, ctx)
        if numbered:
            t.meta.rank = None
        parts.append(Part(t.meta, first, analysis, numbered, held))
        del t
    return parts


def report(files, ctx_of: Callable[[], Context], *, comm_patterns=(), step_pattern=None, jobs=None,
           on_file=None, executor: str = "local", workers: int | None = None, scheduler: str | None = None,
           on_done: Callable[[Tally], None] | None = None, cache: bool = False) -> Report:
    """The Report of discovered ``files`` (:func:`.parsers.discover`), file by file.

    ``ctx_of``: gives the Context once the decode workers run; ``on_file(path)``: before a file is read here;
    ``on_done(tally)``: after each file (:class:`Tally`, for progress); ``workers``/``scheduler``: the Dask
    cluster; ``cache``: use the warm cache (on Dask, each worker's own, at the same location settings).
    """
    comm_patterns = tuple(comm_patterns)
    if executor == "dask" and not _dask_installed():
        raise UsageError(DASK_HINT)     # said whether or not the cache holds the Report
    # Forked first, before this process imports numpy and the analyzers: the workers import them on the
    # other cores meanwhile (see .forked). A Report found in the cache below just stops them again.
    pool = _fork_pool(files, jobs) if executor == "local" else None
    try:
        return _report(files, ctx_of, comm_patterns, step_pattern, jobs, on_file, executor, workers, scheduler,
                       on_done, cache, pool)
    finally:
        if pool is not None:
            pool.close()


def _report(files, ctx_of, comm_patterns, step_pattern, jobs, on_file, executor, workers, scheduler, on_done,
            cache, pool) -> Report:
    whole = None
    if cache and executor in EXECUTORS:
        # The Report layer serves either executor: the Reports are the same, and a repeated report of
        # unchanged files then starts no cluster. On Dask it needs the files visible here too (their keys
        # are their stats); where they are not, the key is None and the workers read them as always.
        if executor == "local":
            decode_workers.jobs_setting()      # a bad TRACELENS_JOBS is a usage error, served from the cache or not
        ctx = ctx_of()
        ctx_of = (lambda ctx=ctx: ctx)
        whole = _report_key(files, comm_patterns, step_pattern, ctx)
        if whole is not None:
            hit = warm.get_report(whole)
            if hit is not None:
                return hit
    if on_done is not None:
        tally = Tally(len(files), sum(map(_size, files)))
        on_done = (lambda done, report=on_done: report(tally.add(done)))
    if executor == "dask":
        ctx = ctx_of()
        done = _dask(files, ctx, comm_patterns, step_pattern, workers, scheduler, on_done, cache)
    elif pool is not None:
        ctx = ctx_of()
        done = _shared(files, pool, ctx, comm_patterns, step_pattern, on_file, on_done, cache)
        pool.close()        # the workers reaped before combine; report()'s finally covers the errors
    elif executor == "local":
        done, ctx = _local(files, ctx_of, comm_patterns, step_pattern, jobs, on_file, on_done, cache)
    else:
        raise UsageError(f"unknown executor {executor!r} (one of: {', '.join(EXECUTORS)})")
    parts = _settle(done, comm_patterns, step_pattern, ctx, getattr(files, "skipped", ()), cache)
    from .parsers.nccl import inputs as nccl_inputs     # lazy: the NCCL log patterns, after the fork

    nccl = nccl_inputs(files.nccl_logs, files.logs_skipped, parts, getattr(files, "outside", ()))
    from .analyzers import combine     # lazy: numpy and the analyzers, after the fork

    out = combine([p.analysis for p in parts], ctx, nccl=nccl)
    if whole is not None:
        warm.put_report(whole, out)
    return out


def _report_key(files, comm_patterns, step_pattern, ctx) -> tuple | None:
    """The key of the whole Report (:func:`.cache.report_key`): what every file's analysis entry is keyed by,
    and what ``combine`` reads besides the files' Parts (the NCCL logs among the inputs, the files skipped)."""
    stamps: dict = {}
    keys = [warm.analysis_key(Path(f), analysis_options(f, comm_patterns, step_pattern, ctx, None, stamps))
            for f in files]
    # The NCCL logs combine reads: those among the inputs, and those a run directory's manifest names (an
    # analysis knows only their size; the transport verdict reads their lines).
    named = [folder / log for folder in dict.fromkeys(Path(f).parent for f in files)
             for log in rundir.named_logs(folder)]
    logs = tuple(warm.file_stamp(Path(p)) if Path(p).exists() else (str(p), None)
                 for p in (*getattr(files, "nccl_logs", ()), *named))
    if any(s is None for s in logs):
        return None
    skipped = tuple((str(p), why) for p, why in (*getattr(files, "skipped", ()), *getattr(files, "logs_skipped", ()),
                                                 *getattr(files, "outside", ())))
    return warm.report_key(keys, (logs, skipped, repr(ctx)))


def _local(files, ctx_of, comm_patterns, step_pattern, jobs, on_file, on_done, cache=False
           ) -> tuple[list[Done], Context]:
    """Every file's Parts, read here in input order (decode workers, if any, decode ahead; not the files the
    warm cache holds): where no worker could be forked (:func:`_fork_pool`). The Context comes first: it
    imports nothing heavy, and a warm file needs no decoding."""
    ctx = ctx_of()
    held, stamps = None, {}
    if cache:
        options = cache_options(comm_patterns, step_pattern)

        def held(f) -> bool:
            return warm.has_analysis(f, analysis_options(f, comm_patterns, step_pattern, ctx, None, stamps)) or \
                warm.has(f, options)
    pool = start_decoding(files, jobs, held=held)
    done = []
    try:
        for k, f in enumerate(files):
            if on_file:
                on_file(f)
            done.append(Done(k, str(f), analyze_file(f, comm_patterns, step_pattern, ctx, pool, cache=cache,
                                                     stamps=stamps), _size(f)))
            if on_done:
                on_done(done[-1])
    finally:
        if pool is not None:
            pool.close()
    return done, ctx


def _fork_pool(files, jobs: int | None):
    """Workers forked to share the files with this process (:mod:`.forked`), or None: one core or one file,
    ``jobs`` (or ``TRACELENS_JOBS``) 0, or no fork here (then :func:`_local` runs, with its decode workers).
    ``jobs``: how many beside this process; by default one per further core."""
    if jobs is None:
        jobs = decode_workers.jobs_setting()
    n = min(len(files) - 1, decode_workers.cores() - 1 if jobs is None else int(jobs))
    if n < 1 or not decode_workers.can_fork():
        return None
    from .forked import ForkedPool     # lazy: only where workers share the files (not one file, not Dask)

    stamps: dict = {}           # each process its own, after the fork

    def work(setup, i: int) -> list[Part]:
        ctx, comm_patterns, step_pattern, cache = setup
        return analyze_file(files[i], comm_patterns, step_pattern, ctx, cache=cache, stamps=stamps)

    return ForkedPool(len(files), n, _worker_imports, work)


def _worker_imports() -> None:
    """What a forked worker imports while this process does the same: all that analysing a file needs
    (an nsys export's reader is imported by the first worker that meets one)."""
    # lazy: the point of this function: a forked worker imports these on its own core
    import numpy  # noqa: F401

    from .analyzers.rank import analyze_rank  # noqa: F401
    from .parsers.kineto import parse  # noqa: F401


def _shared(files, pool, ctx, comm_patterns, step_pattern, on_file, on_done, cache) -> list[Done]:
    """Every file's Parts, each read where it is claimed: here or in a forked worker (:mod:`.forked`).

    An input error is the one reading the files in order would give: the first file's that fails. Once one
    is seen no new file is claimed; the files before it that a dead worker held are read here, then the
    first error is raised."""
    pool.start((ctx, comm_patterns, step_pattern, cache))
    stamps: dict = {}
    done: list[Done] = []
    errors: dict[int, TracelensError] = {}
    answered: set[int] = set()

    def record(i: int, parts) -> None:
        answered.add(i)
        done.append(Done(i, str(files[i]), parts, _size(files[i])))
        if on_done:
            on_done(done[-1])

    def refuse(i: int, exc: TracelensError) -> None:
        answered.add(i)
        errors[i] = exc

    def settle(answers) -> None:
        for i, status, payload in answers:
            # Anything else ("failed", or a payload of the wrong kind) leaves the file to be read here.
            if status == "ok" and isinstance(payload, list) and all(isinstance(p, Part) for p in payload):
                record(i, payload)
            elif status == "error" and isinstance(payload, TracelensError):
                refuse(i, payload)

    def read_here(i: int) -> None:
        if on_file:
            on_file(files[i])
        record(i, analyze_file(files[i], comm_patterns, step_pattern, ctx, cache=cache, stamps=stamps))

    while (i := pool.claim()) is not None:
        try:
            read_here(i)
        except TracelensError as exc:
            refuse(i, exc)
        settle(pool.ready())
        if errors:
            pool.stop()
            break
    # Every file is claimed; the workers may still hold the last ones. What only the end needs is imported
    # now, beside them, rather than after them.
    # lazy: as that says
    from .analyzers import run  # noqa: F401
    from .parsers.nccl import inputs  # noqa: F401

    settle(pool.rest())
    first = min(errors, default=len(files))
    for i in range(first):
        if i not in answered:       # held by a worker that died, or answered "failed": read here
            read_here(i)
    if errors:
        raise errors[first]
    return done


def _size(path) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def _settle(done: list[Done], comm_patterns, step_pattern, ctx, skipped, cache=False) -> list[Part]:
    """Every file's Parts with their ranks settled and the run checked, in report order (rank, file)."""
    from .parsers import runs      # lazy: after the fork, as in _analyze_file

    done = sorted(done, key=lambda d: d.index)
    taken = {p.meta.rank for d in done for p in d.parts if not p.numbered}
    nxt, again = 0, {}
    for d in done:
        for k, p in enumerate(d.parts):
            if not p.numbered:
                continue
            while nxt in taken:
                nxt += 1
            taken.add(nxt)
            if rundir.read_manifest(Path(d.path).parent) is not None:
                again.setdefault(d.index, {})[k] = nxt     # the manifest's entry for this rank applies
            else:
                number_by_order(p.meta, nxt)
                p.analysis.renumber(nxt, "order", "rank-unknown", rank_unknown(nxt), p.meta_warnings)
    for d in done:
        if d.index in again:
            d.parts = analyze_file(d.path, comm_patterns, step_pattern, ctx, ranks=again[d.index], cache=cache)
    parts = [p for d in done for p in d.parts]
    runs.check_one_run(parts)
    parts.sort(key=lambda p: (p.meta.rank, p.meta.source))
    if skipped and parts:       # a note on the inputs as a whole: the first rank carries it, last
        from .contract import WarningEntry     # lazy: msgspec; this module loads before the fork

        parts[0].analysis.warnings.append(WarningEntry(code="not-a-trace", rank=None, count=len(skipped),
                                                       message=describe_skipped(skipped)))
    return parts


def _dask(files, ctx, comm_patterns, step_pattern, workers, scheduler, on_done, cache=False) -> list[Done]:
    """Every file's Parts, read and analysed on Dask workers; the client gathers them as they finish."""
    try:
        from dask.distributed import Client, LocalCluster, as_completed  # lazy: the dask extra, only for it
    except ImportError:
        raise UsageError(DASK_HINT) from None

    if scheduler:
        cluster, client = None, _connect(Client, scheduler)
    else:
        cluster = LocalCluster(n_workers=workers or decode_workers.cores(), threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=50)
        client = Client(cluster)
    try:
        futures = [client.submit(_remote, k, str(f), comm_patterns, step_pattern, ctx, cache, pure=False)
                   for k, f in enumerate(files)]
        done = []
        for future in as_completed(futures):
            done.append(future.result())
            future.release()
            if on_done:
                on_done(done[-1])
        return done
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _dask_installed() -> bool:
    """Whether dask.distributed can be imported, without importing it (its import takes most of a second)."""
    if "dask.distributed" in sys.modules:
        return sys.modules["dask.distributed"] is not None
    return all(importlib.util.find_spec(name) is not None for name in ("dask", "distributed"))


def _remote(index: int, path: str, comm_patterns, step_pattern, ctx, cache=False) -> Done:
    return Done(index, path, analyze_file(path, comm_patterns, step_pattern, ctx, cache=cache), _size(path))


def _connect(client_class, address: str):
    try:
        return client_class(address, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler: {exc}", path=address) from None

