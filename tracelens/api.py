"""The one public entry of tracelens: what the CLI, the gate, a dashboard, an executor and Python users call.

    load(paths, ...)              -> list[RankTrace]     one per rank
    analyze_rank(trace, context)  -> RankAnalysis        one rank's share of the Report (small, picklable)
    combine(analyses, context)    -> Report              the run, from its ranks' analyses
    report(paths, ...)            -> Report              all of it, or a saved report.json read back
    nccl_inputs(paths, traces)    -> NcclInputs          NCCL logs and settings for combine(..., nccl=)
    thresholds(...)               -> Thresholds          config file < TRACELENS_THRESHOLDS < flags
    gate(paths, ...)              -> GateResult          the CI gate: rules, config, baseline
    diff(before, after, ...)      -> Diff                two runs compared, the BEFORE verdict's prediction checked
    compare_reports(a, b, ...)    -> Diff                the same of two Reports already made (the dashboard's)
    annotate(paths, out_dir, ...) -> list[Path]          per rank, the trace with tracelens' tracks added

Nothing heavy is imported at module level: a report finds its inputs and forks its workers before numpy,
the parsers and the analyzers are imported (see pool.py), so that the workers import them on their own
cores while this process does.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from .arguments import (COUNT, ENV, FUNCTION, INTEGER, NAMED, PATH, PATHS, PATTERNS, POSITIVE, SWITCH, TEXT,
                        instance, many, optional, takes)
from .errors import InputError, UsageError
from .options import ReportOptions

if TYPE_CHECKING:  # pragma: no cover
    from .analyzers import Context, RankAnalysis, Thresholds
    from .gating import GateConfig, GateResult
    from .model import RankTrace
    from .contract import Report
    from .contract.two_runs import Diff
    from .model.nccl_records import NcclInputs
    from .parsers import Inputs

THRESHOLDS_ENV = "TRACELENS_THRESHOLDS"   # "name=value,name=value": between the config file and the flags
CONFIG_ENV = "TRACELENS_CONFIG"           # the config file to read when no --config is given


# The kinds of the public functions' parameters (tracelens.arguments); the classes are looked for among the
# modules already imported, so that checking a report's arguments imports none of them.
_THRESHOLDS_TYPE = instance("tracelens.analyzers.thresholds", "Thresholds", "a Thresholds")
_FLAGS = many(TEXT, "a list of NAME=VALUE str")
_KINDS = {
    "paths": PATHS, "comm_patterns": PATTERNS, "step_nvtx": optional(TEXT), "jobs": optional(COUNT),
    "on_file": optional(FUNCTION), "prepare": optional(FUNCTION), "on_done": optional(FUNCTION),
    "on_report": optional(FUNCTION), "cache": optional(SWITCH), "config": optional(PATH), "use_config": SWITCH,
    "env": optional(ENV), "executor": TEXT, "workers": optional(POSITIVE), "scheduler": optional(TEXT),
    "steps_from": TEXT, "thresholds": optional(_THRESHOLDS_TYPE | _FLAGS), "force": SWITCH, "out_dir": PATH,
    "options": instance("tracelens.options", "ReportOptions", "a ReportOptions"),
    "ctx": optional(instance("tracelens.analyzers.seam", "Context", "a Context (api.context())")),
    "nccl": optional(instance("tracelens.model.nccl_records", "NcclInputs", "NcclInputs (api.nccl_inputs())")),
    "traces": many(instance("tracelens.model.rank_trace", "RankTrace", "a RankTrace"),
                   "a list of RankTrace (api.load())"),
}


def _takes(**kinds):
    """:func:`.arguments.takes` with the kinds of the parameters named alike in every function (``_KINDS``)
    and ``kinds``, those of this function alone."""
    def wrap(fn):
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        return takes(**{n: kinds[n] if n in kinds else _KINDS[n] for n in names})(fn)
    return wrap


def _paths(paths) -> list[str]:
    return [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]


# ------------------------------------------------------------------------------------------ load and analyze

@_takes()
def load(paths, *, comm_patterns: Iterable[str] = (), step_nvtx: str | None = None, jobs: int | None = None,
         on_file: Callable[[Path, int, int], None] | None = None, prepare: Callable[[], object] | None = None,
         cache: bool | None = None) -> list[RankTrace]:
    """Every trace under ``paths`` (files, folders searched recursively, globs), one RankTrace per rank (none
    when the inputs are NCCL logs alone).

    ``comm_patterns``: extra regexes for communication kernels; ``step_nvtx``: a regex naming the step ranges
    instead of ``ProfilerStep#N``; ``jobs``: Kineto decode worker processes (0: none; None: decide);
    ``on_file(path, n, total)``: called before the n-th of ``total`` files is parsed (progress); ``prepare``:
    called once the decode
    workers run and before parsing (what it does overlaps the decoding); ``cache``: read and fill the warm
    cache (None: on unless ``TRACELENS_NO_CACHE`` is set; see :mod:`tracelens.cache`).
    """
    # lazy: the parsers, which only the commands that read traces need
    from .parsers import discover

    files = discover(_paths(paths))
    return load_with(files, _options(comm_patterns=comm_patterns, step_nvtx=step_nvtx, jobs=jobs, cache=cache),
                     on_file=on_file, prepare=prepare)


@_takes(files=instance("tracelens.parsers", "Inputs", "Inputs (parsers.discover())"))
def load_with(files: Inputs, options: ReportOptions, *, on_file: Callable[[Path, int, int], None] | None = None,
              prepare: Callable[[], object] | None = None) -> list[RankTrace]:
    """:func:`load` of discovered ``files`` with the options as one value."""
    # lazy: the parsers, which only the commands that read traces need
    from .parsers import load_files, start_decoding

    options = _settled(options)
    decoding = start_decoding(files, options)
    try:
        if prepare is not None:
            prepare()
        return load_files(files, options, on_file, decoding)
    finally:
        if decoding is not None:
            decoding.close()


def _options(*, comm_patterns: Iterable[str] = (), step_nvtx: str | None = None, **rest) -> ReportOptions:
    """The keywords of the public functions as one value: ``step_nvtx`` is ``step_pattern`` inside."""
    return ReportOptions(comm_patterns=tuple(comm_patterns), step_pattern=step_nvtx, **rest)


def _settled(options: ReportOptions) -> ReportOptions:
    """The options with the cache's switch settled: given, else ``TRACELENS_NO_CACHE``, read once here."""
    # lazy: the cache's pickle and zlib, at the first report
    from . import cache as warm

    return options.resolved(warm.enabled(options.cache))


@_takes()
def nccl_inputs(paths, traces: list[RankTrace] = ()) -> NcclInputs:
    """The NCCL logs under ``paths`` (and those the traces' run manifests list), parsed, with the NCCL
    settings recorded for the traces: what the network transport verdict reads besides bandwidth. They are
    for one ``combine``: it takes the NCCL Inspector logs' rows (a run's rows are never held twice), and a
    second combine of them raises ValueError; call this again for another."""
    # lazy: the parsers, which only the commands that read traces need
    from .parsers import discover, nccl

    files = discover(_paths(paths))
    return nccl.inputs(files.nccl_logs, files.logs_skipped, traces, files.outside, files.inspector_logs)


@_takes(thresholds=optional(_THRESHOLDS_TYPE))
def context(thresholds: Thresholds | None = None, *, steps_from: str = "auto", step_nvtx: str | None = None
            ) -> Context:
    """The context every rank's analysis and the combine share: the thresholds, and where the steps come
    from (``steps_from``: auto, markers, inferred or whole; ``step_nvtx``: the regex the steps were read by)."""
    # lazy: numpy and the analyzers, after the workers are forked
    from .analyzers import Context, Thresholds

    return Context(thresholds or Thresholds(), steps_from=steps_from, step_pattern=step_nvtx)


@_takes(trace=instance("tracelens.model.rank_trace", "RankTrace", "a RankTrace (api.load())"))
def analyze_rank(trace: RankTrace, ctx: Context | None = None) -> RankAnalysis:
    """One rank's metrics, findings, warnings and collective instances; the trace can be dropped after."""
    # lazy: numpy and the analyzers
    from .analyzers import analyze_rank as _analyze_rank

    return _analyze_rank(trace, ctx or context())


@_takes(analyses=many(instance("tracelens.analyzers.seam", "RankAnalysis", "a RankAnalysis"),
                        "a list of RankAnalysis (api.analyze_rank())"))
def combine(analyses: Iterable[RankAnalysis], ctx: Context | None = None, *, nccl: NcclInputs | None = None
            ) -> Report:
    """The Report of a run from its ranks' analyses, in any order (each rank once); ``nccl``: its NCCL logs
    and settings (:func:`nccl_inputs`) for the network transport verdict."""
    # lazy: numpy and the analyzers
    from .analyzers import combine as _combine

    return _combine(analyses, ctx or context(), nccl=nccl)


@_takes(thresholds=optional(_THRESHOLDS_TYPE))
def analyze(traces: list[RankTrace], thresholds: Thresholds | None = None, *, nccl: NcclInputs | None = None
            ) -> Report:
    """The Report of loaded traces: each analysed (and released from the list) in turn, then combined."""
    ctx = context(thresholds)
    analyses = []
    traces = list(traces)
    traces.reverse()
    while traces:       # the list lets go of each trace once it is analysed
        analyses.append(analyze_rank(traces.pop(), ctx))
    return combine(analyses, ctx, nccl=nccl)


@_takes()
def report(paths, *, thresholds: Thresholds | Iterable[str] | None = None, comm_patterns: Iterable[str] = (),
           step_nvtx: str | None = None, steps_from: str = "auto", jobs: int | None = None,
           on_file: Callable[[Path, int, int], None] | None = None, config: str | Path | None = None, use_config: bool = False,
           env: Mapping[str, str] | None = None, cache: bool | None = None, executor: str = "local",
           workers: int | None = None, scheduler: str | None = None, on_done: Callable | None = None) -> Report:
    """The Report for ``paths``: traces are loaded and analysed; one saved ``report.json`` is read back.

    ``thresholds``: a :class:`Thresholds`, or ``NAME=VALUE`` strings applied over the config file
    (``use_config``/``config``) and ``TRACELENS_THRESHOLDS`` (see :func:`thresholds`). A bad threshold is
    reported before the (slow) parse. ``cache``: as for :func:`load`. ``steps_from``: ``auto`` (the step
    markers, else steps inferred from the repeating device work, else the whole capture), ``markers``,
    ``inferred`` or ``whole`` (docs/metrics.md, "Steps").

    Each file is analysed and dropped before the next (:mod:`.pipeline`): ``executor`` ``"local"`` (this
    process and ``jobs`` worker processes) or ``"dask"`` (``workers`` on a LocalCluster, or the cluster at
    ``scheduler``); ``on_done(tally)`` after each file (:class:`.executors.Tally`: files, ranks, bytes done).
    """
    given = thresholds if thresholds is None or hasattr(thresholds, "with_overrides") else tuple(thresholds)
    options = _options(comm_patterns=comm_patterns, step_nvtx=step_nvtx, steps_from=steps_from, cache=cache,
                       thresholds=given, config=None if config is None else str(config), use_config=use_config, jobs=jobs,
                       executor=executor, workers=workers, scheduler=scheduler)
    return report_with(paths, options, on_file=on_file, on_done=on_done, env=env)


@_takes()
def report_with(paths, options: ReportOptions, *, on_file: Callable[[Path, int, int], None] | None = None,
                on_done: Callable | None = None, env: Mapping[str, str] | None = None) -> Report:
    """:func:`report` with the options as one value, built once by the caller (the CLI) and passed down as
    it is."""
    return _report(paths, options, None, on_file, on_done, env)


@_takes(fmt=TEXT)
def rendered_with(paths, options: ReportOptions, fmt: str, *, on_file: Callable[[Path, int, int], None] | None = None,
                  on_done: Callable | None = None, env: Mapping[str, str] | None = None, **view) -> str:
    """``render(report_with(paths, options), fmt, **view)``, the same text; a text or Markdown rendering of
    unchanged inputs, rendered the same way before, is read back from the warm cache without the Report.
    ``view``: :func:`tracelens.renderers.render`'s arguments; a ``rank`` the report does not hold is a usage
    error."""
    # lazy: the renderers' entry (rich and each format's module load only when a rendering is drawn)
    from . import renderers

    def draw(rep: Report) -> str:
        rank = view.get("rank")
        if rank is not None and all(r.rank != rank for r in rep.ranks):
            raise UsageError(f"--rank {rank}: no such rank in the report (ranks: "
                             f"{', '.join(str(r.rank) for r in rep.ranks[:20]) or 'none'}"
                             + (", ..." if len(rep.ranks) > 20 else "") + ")")
        return renderers.render(rep, fmt, **view)

    # lazy: the pipeline's View, with the pipeline below
    from .pipeline import View

    out = _report(paths, options, View(renderers.view_key(fmt, **view), draw), on_file, on_done, env)
    return out if isinstance(out, str) else draw(out)


def _report(paths, options: ReportOptions, view, on_file, on_done, env):
    """The Report, or with a ``view`` (:class:`.pipeline.View`) possibly its text (from the cache)."""
    options = _settled(options)
    paths = _paths(paths)
    limits = _as_thresholds(options.thresholds, options.config, options.use_config, env)
    if len(paths) == 1 and paths[0].lower().endswith(".json"):
        # lazy: msgspec (10-20 ms), which would delay the workers of every other report
        from .contract import is_report_file, read_report

        if is_report_file(paths[0]):
            limits()        # a bad threshold is an error here too, though a saved report is not re-analysed
            return read_report(paths[0])
    # lazy: the parsers, which only the commands that read traces need
    from .parsers import discover

    files = discover(paths)
    if not files:           # NCCL logs alone: nothing to analyse rank by rank
        from .parsers import nccl  # lazy: the NCCL log parser, for logs alone

        return analyze([], limits(), nccl=nccl.inputs(files.nccl_logs, files.logs_skipped, [], files.outside,
                                                      files.inspector_logs))
    # lazy: the pipeline (parsers, cache, pool), which a saved report and the other commands do not need
    from . import pipeline

    return pipeline.report(files, options, lambda: context(limits(), steps_from=options.steps_from,
                                                           step_nvtx=options.step_pattern),
                           on_file=on_file, on_done=on_done, view=view)


def _as_thresholds(given, config, use_config: bool, env) -> Callable[[], Thresholds]:
    """A function giving the Thresholds (called while decode workers run: it imports the analyzers)."""
    if given is not None and not isinstance(given, (str, bytes)) and hasattr(given, "with_overrides"):
        return lambda: given
    flags = tuple(given or ())
    resolved: list = []

    def get() -> Thresholds:
        if not resolved:
            resolved.append(thresholds(flags, config=config, use_config=use_config or config is not None, env=env))
        return resolved[0]
    return get


# ------------------------------------------------------------------------------------------- configuration

@_takes()
def config_file(config: str | Path | None = None, *, env: Mapping[str, str] | None = None) -> Path | None:
    """The config file to read: ``config`` when given, else ``TRACELENS_CONFIG``, else the nearest
    ``tracelens.toml`` (or ``pyproject.toml`` with a ``[tool.tracelens]`` table) from the working directory up.
    A named file that does not exist is a usage error."""
    # lazy: the gate's config reader (tomllib), for a report that reads a config file
    from .gating import find_config

    env = os.environ if env is None else env
    named = config or env.get(CONFIG_ENV) or None
    if named is None:
        return find_config()
    path = Path(named)
    if not path.is_file():
        raise UsageError("no such config file", path=str(path))
    return path


@_takes(flags=_FLAGS)
def thresholds(flags: Iterable[str] = (), *, config: str | Path | None = None, use_config: bool = True,
               env: Mapping[str, str] | None = None) -> Thresholds:
    """The thresholds of every rule, each layer over the one before: the defaults; the config file's
    ``[thresholds]`` (tracelens.toml) or ``[tool.tracelens.thresholds]`` (pyproject.toml) table;
    ``TRACELENS_THRESHOLDS="name=value,..."``; ``flags`` (``NAME=VALUE``). Unknown names and bad values are
    usage errors naming where they came from."""
    # lazy: the analyzers (numpy)
    from .analyzers import Thresholds

    env = os.environ if env is None else env
    th = Thresholds()
    path = config_file(config, env=env) if use_config else None
    if path is not None:
        from .gating import read_table  # lazy: tomllib, only with a config file to read

        table = read_table(path, "thresholds")
        th = _override(th, [f"{k}={v}" for k, v in table.items()], str(path))
    raw = env.get(THRESHOLDS_ENV, "").strip()
    if raw:
        th = _override(th, [p for p in raw.split(",") if p.strip()], THRESHOLDS_ENV)
    return th.with_overrides(tuple(flags))


_layered = thresholds      # for functions whose ``thresholds`` argument hides the function


def _override(th: Thresholds, pairs: list[str], where: str) -> Thresholds:
    try:
        return th.with_overrides(pairs)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}") from None


@_takes(rules=optional(NAMED))
def gate_config(rules: Mapping[str, object] | None = None, *, config: str | Path | None = None,
                use_config: bool = True, env: Mapping[str, str] | None = None) -> tuple[GateConfig, str]:
    """The gate's rules: the config file's gate table, then ``rules`` (flags; None values are not given),
    checked. Returns the config and where it came from (for messages)."""
    # lazy: the gate's config reader (tomllib), for the gate command only
    from .gating import GateConfig, load_config

    path = config_file(config, env=env) if use_config else None
    base, where = (load_config(path), str(path)) if path is not None else (GateConfig(), "gate")
    return base.merged(dict(rules or {})).check(where), where


# ---------------------------------------------------------------------------------------------------- diff

@_takes(before=PATHS, after=PATHS, options=optional(_KINDS["options"]))
def diff(before, after, *, options: ReportOptions | None = None,
         on_file: Callable[[Path, int, int], None] | None = None, env: Mapping[str, str] | None = None) -> Diff:
    """Two runs compared (``tracelens diff``; docs/metrics.md, "Comparing two runs"): each a trace folder,
    files or a saved report.json, read with the same ``options`` (:class:`ReportOptions`; the defaults when
    None). What BEFORE's verdict predicted for the change is checked against AFTER's step time."""
    options = options or ReportOptions()
    reports = [report_with(p, options, on_file=on_file, env=env) for p in (before, after)]
    return compare_reports(*reports, before_label=" ".join(_paths(before)), after_label=" ".join(_paths(after)))


@_takes(before=instance("tracelens.contract", "Report", "a Report"),
        after=instance("tracelens.contract", "Report", "a Report"), before_label=TEXT, after_label=TEXT)
def compare_reports(before: Report, after: Report, *, before_label: str = "before", after_label: str = "after"
                    ) -> Diff:
    """:func:`diff` of two Reports already made (the dashboard's runs A and B, read once for all its views);
    the labels name the runs in the Diff (``diff`` gives the paths)."""
    from .analyzers.compare import compare     # lazy: only a diff needs it

    return compare(before, after, before_label, after_label)


# ---------------------------------------------------------------------------------------------------- gate

@_takes(config=instance("tracelens.gating.config", "GateConfig", "a GateConfig (api.gate_config())"))
def baseline(config: GateConfig, *, thresholds=None, comm_patterns: Iterable[str] = (),
             step_nvtx: str | None = None, steps_from: str = "auto", cache: bool | None = None
             ) -> tuple[object | None, list[str]]:
    """What relative rules compare with: the config's baseline report or trace folder, or the latest run of
    ``against`` in the history database; (None, [why]) when the history has none yet."""
    from . import gating      # lazy: pandas, for a gate only

    if config.baseline:
        base = report([config.baseline], thresholds=thresholds, comm_patterns=comm_patterns, step_nvtx=step_nvtx,
                      steps_from=steps_from, cache=cache)
        return gating.Baseline(gating.step_frame(base), config.baseline), []
    if config.history:
        # lazy: sqlite3, for a gate against the history only
        from .history_db import baseline_from

        found, why = baseline_from(config.history, config.against)
        return found, [why] if why else []
    return None, []


@_takes(rules=optional(NAMED))
def gate(paths, *, rules: Mapping[str, object] | None = None, config: str | Path | None = None,
         use_config: bool = True, thresholds=None, comm_patterns: Iterable[str] = (),
         step_nvtx: str | None = None, steps_from: str = "auto",
         on_file: Callable[[Path, int, int], None] | None = None,
         env: Mapping[str, str] | None = None, on_report: Callable[[Report], None] | None = None,
         cache: bool | None = None, **run_on) -> GateResult:
    """Apply the gate's rules to the run at ``paths`` (and its baseline): the CI gate as a function.
    ``on_report`` is given the run's Report (e.g. to attach it as an HTML file); ``cache``: as for :func:`load`;
    ``run_on``: :func:`report`'s ``executor``, ``workers``, ``scheduler`` and ``on_done`` for the run."""
    from . import gating      # lazy: pandas, for a gate only

    cfg, _ = gate_config(rules, config=config, use_config=use_config, env=env)
    if thresholds is None or not hasattr(thresholds, "with_overrides"):     # the run and its baseline alike
        thresholds = _layered(tuple(thresholds or ()), config=config, use_config=use_config, env=env)
    rep = report(paths, thresholds=thresholds, comm_patterns=comm_patterns, step_nvtx=step_nvtx,
                 steps_from=steps_from, on_file=on_file, cache=cache, **run_on)
    if on_report is not None:
        on_report(rep)
    base, notes = baseline(cfg, thresholds=thresholds, comm_patterns=comm_patterns, step_nvtx=step_nvtx,
                           steps_from=steps_from, cache=cache)
    return gating.evaluate(rep, cfg, base, source=" ".join(_paths(paths)), notes=notes)


# ------------------------------------------------------------------------------------------- annotate

@_takes()
def annotate(paths, out_dir: str | Path, *, force: bool = False, thresholds: Thresholds | Iterable[str] | None = None,
             comm_patterns: Iterable[str] = (), step_nvtx: str | None = None, steps_from: str = "auto",
             config: str | Path | None = None, use_config: bool = False, env: Mapping[str, str] | None = None,
             cache: bool | None = None, jobs: int | None = None,
             on_file: Callable[[Path, int, int], None] | None = None) -> list[Path]:
    """Write into ``out_dir``, per rank, its trace with tracelens' tracks added, for Perfetto UI and
    chrome://tracing (docs/annotate.md): ``rank<N>.tracelens.json`` (``.json.gz`` for a gzipped
    Kineto trace); for an Nsight Systems export, an overlay of the added tracks alone on the export's clock.
    Returns the paths written. The report options are :func:`report`'s; an annotated trace of an earlier run
    in ``out_dir`` is refused unless ``force``."""
    given = thresholds if thresholds is None or hasattr(thresholds, "with_overrides") else tuple(thresholds)
    options = _options(comm_patterns=comm_patterns, step_nvtx=step_nvtx, steps_from=steps_from, cache=cache,
                       thresholds=given, config=None if config is None else str(config), use_config=use_config,
                       jobs=jobs)
    return annotate_with(paths, out_dir, options, force=force, on_file=on_file, env=env)


@_takes()
def annotate_with(paths, out_dir: str | Path, options: ReportOptions, *, force: bool = False,
                  on_file: Callable[[Path, int, int], None] | None = None, on_done: Callable | None = None,
                  env: Mapping[str, str] | None = None) -> list[Path]:
    """:func:`annotate` with the options as one value (the CLI's).

    The Report comes first (:func:`report_with`, from the warm cache when it holds it); then each trace file
    in turn gives its ranks' analyses again (the cache's analysis layer, or the file read once more) for what
    the Report does not hold, the exposed intervals, and its annotated traces are written before the next."""
    # lazy: the writer (and ISA-L), for annotate only
    from . import annotation_files as files_out

    found = files_out.existing(out_dir)
    if found and not force:     # checked before the slow parse, as for export
        raise UsageError(f"output folder holds annotated traces ({', '.join(found[:4])}"
                         f"{', ...' if len(found) > 4 else ''}): use --force to overwrite them", path=str(out_dir))
    paths = _paths(paths)
    if len(paths) == 1 and paths[0].lower().endswith(".json"):
        # lazy: msgspec, as in report_with
        from .contract import is_report_file

        if is_report_file(paths[0]):
            raise UsageError("a saved report holds no trace to annotate: give the traces it was made of",
                             path=paths[0])
    rep = report_with(paths, options, on_file=on_file, on_done=on_done, env=env)
    # lazy: the parsers and the pipeline, after the report (which may have come from the cache)
    from . import pipeline
    from .parsers import discover
    from .renderers.added_tracks import RankSide, document, events

    inputs = discover(paths)
    if not inputs:
        raise UsageError("no trace files found: NCCL logs alone have nothing to annotate", path=" ".join(paths))
    options = _settled(options)
    limits = _as_thresholds(options.thresholds, options.config, options.use_config, env)
    ctx = context(limits(), steps_from=options.steps_from, step_nvtx=options.step_pattern)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write output: {exc.strerror or exc}", path=str(out)) from None
    # Every output's name, and that none is an input, before anything is written.
    targets = {i.rank: out / files_out.name(i.rank, i.format == "kineto" and files_out.is_gzip(Path(i.path)))
               for i in rep.inputs if i.format in ("kineto", "nsys") and i.rank_rule != "manifest"}
    held = files_out.identities(list(inputs))
    for target in targets.values():
        files_out.check_output(target, held)
    memo: dict = {}
    written = []
    for path in inputs:
        for part in pipeline.analyze_file(path, options, ctx, memo):
            rank = _rank_of(rep, part)
            exposed = part.analysis.exposed if len(part.analysis.exposed) == 2 else ((), ())
            added = events(rep, rank, RankSide(exposed=exposed, base_ns=part.meta.base_ns,
                                               capture_start_ns=part.first_ns))
            kineto, target = part.meta.format == "kineto", targets[rank]
            try:
                if kineto:
                    files_out.write_kineto(Path(path), target, added)
                else:
                    files_out.write_overlay(target, document(added, {
                        "rank": rank, "source": part.analysis.source,
                        "clock": "microseconds since the start of the Nsight Systems session"}))
            except OSError as exc:
                raise UsageError(f"cannot write output: {exc.strerror or exc}", path=str(target)) from None
            written.append(target)
    return written


def _rank_of(rep: Report, part) -> int:
    """The Report's rank of one of a file's analysed ranks: the rank of the same trace (its source, and where a
    file holds several, its number, else its device and step windows)."""
    a = part.analysis
    same = [r for r in rep.ranks if r.source == a.source]
    if len(same) > 1:
        same = [r for r in same if r.rank == a.rank] or [
            r for r in same if r.device == a.result.device
            and [(s.start_ns, s.end_ns) for s in r.steps] == [(s.start_ns, s.end_ns) for s in a.result.steps]]
    if len(same) != 1:
        raise InputError("the trace changed while it was annotated: run the command again", path=a.source)
    return same[0].rank


# ------------------------------------------------------------------------------------------- drill-down

@_takes(rep=instance("tracelens.contract", "Report", "a Report"), rank=INTEGER, step=optional(INTEGER),
        max_shapes=optional(POSITIVE))
def step_timeline(rep: Report, rank: int, step: int | None, *, comm_patterns: Iterable[str] = (),
                  step_nvtx: str | None = None, max_shapes: int | None = None):
    """The timeline of one rank and step of ``rep`` (a :class:`~tracelens.model.step_timeline.StepTimeline`): only the
    rank's own input file is read, and only files the Report names as its inputs. UsageError when the rank or
    step is not in the Report or its trace cannot be found."""
    # lazy: numpy and the analyzers, for the dashboard's drill-down only
    from .analyzers.rank.lanes import MAX_SHAPES, step_timeline as _timeline

    if not any(r.rank == rank and any(s.step == step for s in r.steps) for r in rep.ranks):
        raise UsageError(f"the report has no rank {rank} with step {step}")
    # the rank's trace, not a side file (manifest, NCCL log) listed beside it
    files = [i for i in rep.inputs
             if i.rank == rank and i.format in ("kineto", "nsys") and i.rank_rule != "manifest"]
    found = [Path(i.path) for i in files if Path(i.path).is_file()]
    if not found:
        raise InputError(f"the trace of rank {rank} is not here ({', '.join(i.path for i in files) or 'none named'})")
    traces = load([found[0]], comm_patterns=comm_patterns, step_nvtx=step_nvtx, jobs=0)
    mine = [t for t in traces if t.meta.rank == rank]
    # A file read alone may number its rank by name or order differently than the run did; one that says
    # its rank itself (distributedInfo) is used only for that rank: a saved report is untrusted input.
    if not mine and len(traces) == 1 and traces[0].meta.rank_rule != "distributedInfo":
        mine = traces
    if not mine:
        said = sorted({t.meta.rank for t in traces if t.meta.rank_rule == "distributedInfo"})
        whose = f": it is rank {', '.join(map(str, said))}'s (its distributedInfo)" if said else ""
        raise InputError(f"no rank {rank} in this trace{whose}", path=str(found[0]))
    # The steps as the report settled them: an inferred step is found again the same way (with the
    # optimizer's cycle the inference takes the same boundaries whether asked or not).
    option = {"inferred": "inferred", "whole-capture": "whole"}.get(next(
        (r.steps_from for r in rep.ranks if r.rank == rank), None) or "", "markers")
    try:
        return _timeline(mine[0], step, max_shapes=max_shapes or MAX_SHAPES, steps_from=option, step_pattern=step_nvtx)
    except KeyError:        # a saved report naming a step its trace does not have
        raise InputError(f"no step {step} of rank {rank} in this trace", path=str(found[0])) from None


@_takes(db=PATH, label=optional(TEXT), limit=COUNT)
def history_runs(db: str | Path, label: str | None = None, limit: int = 1000) -> list[dict]:
    """The runs of a history database (summary metrics, label, commit, time, source), oldest first."""
    # lazy: sqlite3, for the history only
    from .history_db import list_runs, open_db

    with open_db(db, create=False) as handle:
        return list(reversed(list_runs(handle, label, limit)))
