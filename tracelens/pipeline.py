"""A report, file by file: each file is parsed, its ranks analysed, and its tables dropped before the next.

Peak memory then follows the largest file (times the workers), not the rank count: all that stays of a rank
is a :class:`Part`, its metadata and its :class:`~.analyzers.RankAnalysis`. The files are spread by an
executor (:mod:`.executors`); what needs every rank is settled from the Parts once all files are read, by
the same function that settles ``load``'s whole traces (:func:`.parsers.runs.settle`):

- a rank recorded nowhere (trace, environment, file name) is analysed under a stand-in number and renumbered
  by input order afterwards (:meth:`RankAnalysis.renumber`); in a run directory whose manifest may give it
  an environment or an NCCL log by that number, its file is read again under its final rank;
- several runs are refused, from each rank's metadata and first event.

The warm cache is read and filled here for its analysis and report layers (the tables layer is the
parser's, :func:`.parsers.parse_file`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from . import cache, executors
from .executors import Done, FileJob, Tally
from .options import ReportOptions
from .parsers import cache_options, parse_file, rundir, runs

if TYPE_CHECKING:  # pragma: no cover
    from .analyzers import Context, RankAnalysis
    from .contract import Report
    from .model.meta import RunMeta
    from .parsers import Inputs

STAND_IN = -1          # the rank an unnumbered trace is analysed under until every file's ranks are known


@dataclass
class Part:
    """One rank of one file once analysed: its metadata (no tables), its first event, its analysis.

    ``meta_warnings``: how many of the analysis' warnings came from the trace's metadata (where a settled
    rank's note goes). A rank recorded nowhere keeps ``meta.rank`` None until it is settled."""

    meta: RunMeta
    first_ns: int | None
    analysis: RankAnalysis
    meta_warnings: int


def analyze_file(path, options: ReportOptions, ctx: Context, memo: dict | None = None,
                 ranks: dict[int, int] | None = None) -> list[Part]:
    """The Parts of one trace file; each trace is released once analysed. ``ranks``: the numbers of this
    file's unnumbered traces by their position in it (a second reading, once every rank is known);
    ``memo``: what the files of one report share in this process (the run directories' side files, looked
    at once a report). The analysis layer of the warm cache holds a file analysed the same way before."""
    k = cache.ANALYSES.key(Path(path), analysis_options(path, options, ctx, ranks, memo)) if options.cache else None
    hit = cache.ANALYSES.get(k) if k is not None else None
    if hit is not None:
        return hit
    parts = _analyze(path, options, ctx, ranks, (memo or {}).get(executors.DECODING))
    if k is not None:
        cache.ANALYSES.put(k, parts)
    return parts


def analysis_options(path, options: ReportOptions, ctx: Context, ranks: dict[int, int] | None,
                     memo: dict | None = None) -> tuple:
    """Everything besides the file and the code that decides its Parts: the parse options, the thresholds,
    the ranks given to unnumbered traces, and the run directory's manifest and NCCL logs (by folder, in
    ``memo``; a thousand traces of one run directory share them)."""
    folder = Path(path).parent
    memo = {} if memo is None else memo
    if folder not in memo:
        memo[folder] = rundir.stamp(folder)
    # The same for every file of a report (the thresholds' repr alone is 2 KB): made once.
    common = ("options", id(options), id(ctx))
    if common not in memo:
        memo[common] = (*cache_options(options), repr(ctx))
    return (*memo[common], tuple(sorted(ranks.items())) if ranks else None, memo[folder])


def _analyze(path, options: ReportOptions, ctx: Context, ranks: dict[int, int] | None,
             decoding=None) -> list[Part]:
    traces = runs.claim_ranks(parse_file(Path(path), options, decoding), ranks)
    # lazy: numpy and every analyzer, imported once the workers are forked (after the parse: a file decoded
    # on two cores imports them here while the other core finishes its part, see executors.Local)
    from .analyzers import analyze_rank

    parts = []
    traces.reverse()
    while traces:           # the list lets go of each trace once it is analysed
        t = traces.pop()
        numbered = t.meta.rank is None
        if numbered:
            t.meta.rank = STAND_IN
        first, held = runs.first_event_ns(t), len(t.meta.warnings)
        analysis = analyze_rank(t, ctx)
        if numbered:
            t.meta.rank = None
        parts.append(Part(t.meta, first, analysis, held))
        del t
    return parts


def _parts(result) -> bool:
    return isinstance(result, list) and all(isinstance(p, Part) for p in result)


def _worker_imports() -> None:
    """What a local worker imports while this process does the same: all that analysing a file needs (an
    nsys export's reader is imported by the first worker that meets one)."""
    # lazy: all three, in the worker right after its fork (the point of this function)
    import numpy  # noqa: F401

    from .analyzers.rank import analyze_rank  # noqa: F401  # lazy: numpy, in the worker
    from .parsers.kineto import parse  # noqa: F401  # lazy: msgspec, in the worker


@dataclass(frozen=True)
class View:
    """A rendering of the Report that the warm cache keeps beside it: ``key``, everything it depends on besides
    the Report (:func:`.renderers.view_key`; None: not kept); ``draw(report)``, the text."""

    key: tuple | None
    draw: Callable[[Report], str]


def report(files: Inputs, options: ReportOptions, ctx_of: Callable[[], Context], *,
           on_file: executors.OnFile | None = None, on_done: Callable[[Tally], None] | None = None,
           view: View | None = None):
    """The Report of discovered ``files`` (:func:`.parsers.discover`), file by file; with a ``view``, its
    text instead (read back whole when the same inputs were viewed the same way before).

    ``ctx_of``: gives the Context once the workers run; ``on_file(path, n, total)``: before a file is read
    here; ``on_done(tally)``: after each file (:class:`.executors.Tally`, for progress). ``options.cache``:
    use the warm cache (on Dask, each worker's own, at the same location settings)."""
    out, key = _report(files, options, ctx_of, on_file, on_done, view)
    if view is None or isinstance(out, str):
        return out
    text = view.draw(out)
    seen = cache.RENDERS.key(key, view.key)
    if seen is not None:
        cache.RENDERS.put(seen, text)
    return text


def _report(files: Inputs, options: ReportOptions, ctx_of, on_file, on_done, view: View | None) -> tuple:
    """(the Report, or a view's text from the cache; the Report's key, None when it is not cached)."""
    # The workers first, before this process imports numpy and the analyzers: they import them on the
    # other cores meanwhile. A Report found in the cache below just stops them again. Without file workers
    # a second core is free while a file is analysed: its tables entry is written there meanwhile.
    with executors.make(files, options, FileJob(analyze_file, _parts, _worker_imports)) as executor, \
            cache.writes_beside(not getattr(executor, "workers", 1)):
        ctx = ctx_of()
        # The Report layer serves either executor: a repeated report of unchanged files starts no cluster.
        # On Dask it needs the files visible here too (their keys are their stats); where they are not, the
        # key is None and the workers read them as always.
        key = report_key(files, options, ctx) if options.cache else None
        seen = cache.RENDERS.key(key, view.key) if view is not None else None
        text = cache.RENDERS.get(seen) if seen is not None else None
        if text is not None:
            return text, key
        hit = cache.REPORTS.get(key) if key is not None else None
        if hit is not None:
            return hit, key
        if on_done is not None:
            tally = Tally(len(files), sum(map(executors.size, files)))
            on_done = (lambda done, tell=on_done: tell(tally.add(done)))
        done = executor.run(ctx, on_file, on_done, meanwhile=_end_imports)
    parts = settle(done, options, ctx, getattr(files, "skipped", ()))
    # lazy: the NCCL log parser and combine, after the files (a warm report needs neither)
    from .analyzers import combine
    from .parsers.nccl import inputs as nccl_inputs  # lazy: the NCCL log patterns, after the files

    nccl = nccl_inputs(files.nccl_logs, files.logs_skipped, parts, getattr(files, "outside", ()),
                       getattr(files, "inspector_logs", ()))
    out = combine([p.analysis for p in parts], ctx, nccl=nccl)
    if key is not None:
        cache.REPORTS.put(key, out)
    return out, key


def _end_imports() -> None:
    """What only the end of a report needs, imported while workers may still hold the last files."""
    # lazy: combine's modules and the NCCL log patterns, beside the workers' last files (the point here)
    from .analyzers import run  # noqa: F401
    from .parsers.nccl import inputs  # noqa: F401  # lazy: as above


def settle(done: list[Done], options: ReportOptions, ctx: Context, skipped) -> list[Part]:
    """Every file's Parts with their ranks settled and the run checked, in report order (rank, file)."""
    done = sorted(done, key=lambda d: d.index)

    def renumber(path, parts: list[Part], given: dict[int, int]) -> list[Part]:
        if rundir.read_manifest(Path(path).parent) is not None:
            # The manifest's entry for this rank applies: the file is read again under its number.
            return analyze_file(path, options, ctx, ranks=given)
        for k, rank in given.items():
            p = parts[k]
            runs.number_by_order(p.meta, rank)
            p.analysis.renumber(rank, "order", "rank-unknown", runs.rank_unknown(rank), p.meta_warnings)
        return parts

    def note(first: Part, text: str, count: int) -> None:
        # lazy: the contract (msgspec), on a report that skipped files only
        from .contract import WarningEntry

        first.analysis.warnings.append(WarningEntry(code="not-a-trace", rank=None, count=count, message=text))

    return runs.settle([(d.path, d.parts) for d in done], skipped, renumber, note)


def report_key(files: Inputs, options: ReportOptions, ctx: Context) -> tuple | None:
    """The key of the whole Report: what every file's analysis entry is keyed by, and what ``combine`` reads
    besides the files' Parts (the NCCL logs among the inputs, the files skipped)."""
    memo: dict = {}
    keys = [cache.ANALYSES.key(Path(f), analysis_options(f, options, ctx, None, memo)) for f in files]
    # The NCCL logs combine reads: those among the inputs, and those a run directory's manifest names (an
    # analysis knows only their size; the transport verdict reads their lines).
    named = [folder / log for folder in dict.fromkeys(Path(f).parent for f in files)
             for log in rundir.named_logs(folder)]
    logs = tuple(cache.file_stamp(Path(p)) if Path(p).exists() else (str(p), None)
                 for p in (*getattr(files, "nccl_logs", ()), *getattr(files, "inspector_logs", ()), *named))
    if any(s is None for s in logs):
        return None
    skipped = tuple((str(p), why) for p, why in (*getattr(files, "skipped", ()), *getattr(files, "logs_skipped", ()),
                                                 *getattr(files, "outside", ())))
    return cache.REPORTS.key(keys, (logs, skipped, repr(ctx)))
