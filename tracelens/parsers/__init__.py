"""Find trace files and parse them into RankTraces (one per file, one per rank).

Importing this package imports no parser: discovery and the Kineto decode workers start first, so that a
fresh process decodes while it imports the rest (see :mod:`.workers`).
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from ..errors import InputError, UsageError, printable
from ..model.rundir_layout import BOOTSTRAP, NCCL_LOGS
from . import rundir, walk, workers
from .kineto import MAX_INFLATE_ENV
from .nccl import LOG_SUFFIXES, maybe_log, sniff

if TYPE_CHECKING:
    from ..model import RankTrace
    from .workers import DecodePool

KINETO_SUFFIXES = (".json", ".json.gz", ".json.tmp", ".json.gz.tmp")
NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")


def detect_format(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith(KINETO_SUFFIXES):
        return "kineto"
    if name.endswith(NSYS_SUFFIXES):
        return "nsys"
    return None


class Inputs(list):
    """The trace files to read (a list of paths), and ``skipped``: (path, why) for the files a directory or
    glob held that are not traces; ``nccl_logs``: the NCCL debug logs among the inputs, and ``logs_skipped``:
    (path, why) for files meant as logs that hold no NCCL line; ``outside``: (path, link text) for the links
    in a folder that lead outside it, not read. It passes through callers that only need the paths
    unchanged."""

    def __init__(self, files=(), skipped=(), nccl_logs=(), logs_skipped=(), outside=()):
        super().__init__(files)
        self.skipped: list[tuple[Path, str]] = list(skipped)
        self.nccl_logs: list[Path] = list(nccl_logs)
        self.logs_skipped: list[tuple[Path, str]] = list(logs_skipped)
        self.outside: list[tuple[Path, str]] = list(outside)


_SNIFFED = {"binary": "binary, not a log", "empty": "empty", None: "no NCCL lines"}


def discover(paths: Iterable[str]) -> Inputs:
    """Expand files, directories (searched recursively) and glob patterns into trace files and NCCL logs.

    A file named explicitly is always read (and is an input error if it is not a trace), unless its content
    says it is an NCCL log. A JSON file found in a directory or by a glob is read only when its content says
    it is a trace (:func:`sniff_json`): the others (``config.json``, ``tokenizer.json``, a saved report) are
    listed in ``skipped``. Any other file whose head has NCCL log lines is an NCCL log (:mod:`.nccl`);
    a file named as a log (``*.log``, ``*.txt``, ...) or kept in a run directory's ``nccl/`` folder that has
    none is listed in ``logs_skipped``. A link found in a directory that leads outside it (a file or a
    folder) is not followed: listed in ``outside``. No traces and no logs is a usage error.
    """
    found: list[Path] = []
    named: set[Path] = set()
    logs: list[Path] = []
    logs_skipped: list[tuple[Path, str]] = []
    outside: list[tuple[Path, str]] = []

    def other(f: Path) -> bool:
        """Sort a file that is not a trace by name: an NCCL log, a skipped log, or (False) neither."""
        kind = sniff(f)
        if kind == "nccl":
            logs.append(f)
            return True
        if f.name.lower().endswith(LOG_SUFFIXES) or f.parent.name == NCCL_LOGS:
            logs_skipped.append((f, _SNIFFED.get(kind, "no NCCL lines")))
            return True
        return False

    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            files = [f for f in walk.files_under(p, outside) if not rundir.is_side_file(f)]
            hits = [f for f in files if detect_format(f)]
            for f in files:
                if detect_format(f) or f.parent.name == BOOTSTRAP or not maybe_log(f):
                    continue
                kind = sniff(f)
                if kind == "nccl":
                    logs.append(f)
                elif f.parent.name == NCCL_LOGS:      # a run directory's log folder holds nothing else
                    logs_skipped.append((f, _SNIFFED.get(kind, "no NCCL lines")))
        elif p.is_file():
            if detect_format(p) or not other(p):
                found.append(p)
                named.add(p)
            continue
        elif any(ch in arg for ch in "*?["):
            hits = [f for f in walk.glob_files(arg) if detect_format(f) or not other(f)]
        else:
            raise UsageError("no such file or directory", path=arg)
        found += hits
    skipped: list[tuple[Path, str]] = []
    unique = []
    for f in dict.fromkeys(found):
        why = sniff_json(f) if f not in named and detect_format(f) == "kineto" else None
        if why is None:
            unique.append(f)
        else:
            skipped.append((f, why))
    logs = list(dict.fromkeys(logs))
    if not unique and not logs:
        extra = "; ".join([describe_skipped(s, what=w) for s, w in ((skipped, "traces"), (logs_skipped, "NCCL logs"))
                           if s] + [describe_outside(outside)] * bool(outside))
        raise UsageError("no trace files found (expected *.json, *.json.gz, *.sqlite, *.nsys-rep) and no NCCL "
                         "log (NCCL_DEBUG=INFO output)" + (f"; {extra}" if extra else ""), path=" ".join(paths))
    # rank0.nsys-rep next to its own export rank0.sqlite is one input, read through the report (which
    # reuses the export while it is current).
    reports = {f.with_suffix("") for f in unique if f.suffix.lower() in (".nsys-rep", ".qdrep")}
    return Inputs([f for f in unique if not (f.suffix.lower() == ".sqlite" and f.with_suffix("") in reports)],
                  skipped, logs, logs_skipped, outside)


_TRACE_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_LIST = re.compile(rb'\[\s*\{[^{}]*"ph"\s*:')
# The family of contract.SCHEMA, spelt out: decode workers import this package first, and contract.py is
# nothing they need (tests/integration/test_inputs.py recognises a saved report through it).
_REPORT_HEAD = re.compile(rb'^\{\s*"schema"\s*:\s*"tracelens\.report/')


def sniff_json(path: Path) -> str | None:
    """Why a JSON file found in a directory is not a trace, or None when it is one or might be one.

    A trace is an object with a ``traceEvents`` list, or a list of events (``[{"ph": ...``). The key is
    looked for in the text as it streams in: real traces have it within their first 17 KB, and a file
    without it is scanned to its end, never parsed. A saved tracelens report is recognised by its schema;
    text that does not begin as JSON is not a trace. A file that cannot be read, is empty, or is cut short
    before its key shows (a gzip stream that ends early) is left to the parser, which says what is wrong
    with it: a trace whose writer died is an input error, not something to skip.
    """
    started = False
    window = b""
    try:
        with open(path, "rb") as fh:
            for text in _text_pieces(fh):
                if not started:
                    text = text.lstrip()
                    if not text:
                        continue
                    started = True
                    if text[:1] == b"[":
                        return None if _EVENT_LIST.match(text) else "a JSON list, not of events"
                    if text[:1] != b"{":
                        return "not JSON"
                    if _REPORT_HEAD.match(text):
                        return "a saved tracelens report"
                window = window[-32:] + text       # the key may straddle two pieces
                if _TRACE_KEY.search(window):
                    return None
    except (OSError, zlib.error, EOFError):      # unreadable, corrupt or cut-short gzip: the parser says so
        return None
    return "no 'traceEvents'" if started else None


def _text_pieces(fh, size: int = 1 << 14):
    """The file's text in pieces of at most 4 * ``size`` bytes, gunzipped when it is gzip (only as far as
    it is read: a trace's key shows in its first pieces; the first inflated one is ``size`` bytes). EOFError
    when a gzip stream ends early."""
    data = fh.read(size)
    if data[:2] != b"\x1f\x8b":
        while data:
            yield data
            data = fh.read(4 * size)
        return
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    limit = size            # a small first piece: the key shows in it, and inflating costs by the byte out
    while True:
        text = inflater.decompress(data, limit)
        limit = 4 * size
        if text:
            yield text
        if inflater.eof:
            return
        data = inflater.unconsumed_tail or fh.read(size)
        if not data:
            raise EOFError


def describe_skipped(skipped: list[tuple[Path, str]], most: int = 6, what: str = "traces") -> str:
    """One line naming the files skipped, grouped by reason (at most ``most`` names); ``what``: what they
    are not (``traces``, ``NCCL logs``)."""
    by_reason: dict[str, list[str]] = {}
    for f, why in skipped:
        by_reason.setdefault(why, []).append(printable(str(f), one_line=True))
    parts = []
    for why, names in by_reason.items():
        shown = ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")
        parts.append(f"{shown} ({why})")
    one = {"traces": "a trace", "NCCL logs": "an NCCL log"}.get(what, what)
    return (f"skipped {len(skipped)} file{'s' if len(skipped) != 1 else ''} that "
            f"{f'are not {what}' if len(skipped) != 1 else f'is not {one}'}: " + "; ".join(parts))


def describe_outside(outside: list[tuple[Path, str]], most: int = 6) -> str:
    """One line naming the links left out because they lead outside the folder given."""
    shown = ", ".join(printable(f"{p} ({text})", one_line=True) for p, text in outside[:most])
    more = f" and {len(outside) - most} more" if len(outside) > most else ""
    return (f"left out {len(outside)} link{'s' if len(outside) != 1 else ''} that lead{'s' if len(outside) == 1 else ''} "
            f"outside the folder: {shown}{more} (name a file on the command line to read it)")


def parse_file(path: Path, comm_patterns: tuple[str, ...] = (), step_pattern: str | None = None,
               pool: DecodePool | None = None, cache: bool = False) -> list[RankTrace]:
    """The RankTraces in one file: one for a Kineto trace, one per GPU process for an nsys export.

    ``pool``: decode workers that may already hold this file's columns; ``cache``: read and fill the warm
    cache (:mod:`tracelens.cache`).
    """
    from ..model.classify import user_rules    # lazy: numpy, after the workers start

    fmt = detect_format(path) or _sniff(path)
    try:
        rules = user_rules(comm_patterns)
        if step_pattern:
            re.compile(step_pattern)
    except (ValueError, re.error) as exc:
        raise UsageError(f"bad pattern: {exc}") from None
    if cache:
        from .. import cache as warm    # lazy: a fresh decode worker imports this package, never the cache

        options = cache_options(comm_patterns, step_pattern)
        before = warm.key(path, options)
        hit = warm.get(path, options, before) if before is not None else None
        if hit is not None:
            return hit
    # Here, not above, and only the one the file needs: a warm run needs neither parser, and a Kineto
    # report no nsys reader (bench/RESULTS.md, "parser packages").
    if fmt == "nsys":
        from . import nsys      # lazy: only the parser this file needs (above)

        traces = nsys.parse(path, rules, step_pattern)
    else:
        from . import kineto    # lazy: only the parser this file needs (above)

        traces = [kineto.parse(path, rules, step_pattern, decoded=pool.take(path) if pool else None)]
    if cache and before is not None:
        warm.put(path, options, traces, before)   # before the load settles ranks: the entry is the file's alone
    return traces


def cache_options(comm_patterns: tuple[str, ...], step_pattern: str | None) -> tuple:
    """What besides the file decides what parsing it gives: the patterns, and the inflate limit (a cached
    file must not get past a lower one)."""
    return (tuple(comm_patterns), step_pattern, os.environ.get(MAX_INFLATE_ENV, "").strip())


def _sniff(path: Path) -> str:
    """Format of a file without a known suffix, from its first bytes (SQLite header, else JSON)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", path=str(path)) from None
    return "nsys" if head.startswith(b"SQLite format 3") else "kineto"


def _format_or_none(path: Path) -> str | None:
    try:
        return detect_format(path) or _sniff(path)
    except InputError:
        return None  # reported when the file is parsed


def load(paths: Iterable[str] | str, comm_patterns: tuple[str, ...] = (),
         on_file: Callable[[Path], None] | None = None, step_pattern: str | None = None,
         jobs: int | None = None) -> list[RankTrace]:
    """Parse every trace under ``paths`` and settle each one's rank.

    ``comm_patterns``: extra regexes for communication kernels; ``step_pattern``: a regex naming the
    step ranges (NVTX ranges or profiler annotations) to use instead of ``ProfilerStep#N``; ``jobs``:
    Kineto decode worker processes (0: decode in this process; None: decide, see :func:`.workers.jobs_for`).
    """
    if isinstance(paths, (str, Path)):
        paths = [str(paths)]
    files = discover([str(p) for p in paths])
    return load_files(files, comm_patterns, on_file, step_pattern, pool=start_decoding(files, jobs))


def start_decoding(files: list[Path], jobs: int | None = None, held: Callable[[Path], bool] | None = None
                   ) -> DecodePool | None:
    """Start decoding the Kineto files among ``files`` in worker processes, when that pays (else None).

    Call it before the parsers and analyzers are imported, to decode while they load; pass the pool to
    :func:`load_files`, which closes it. ``held``: whether the warm cache holds a file (it is not decoded).
    """
    kineto_files = [f for f in files if _format_or_none(f) == "kineto" and not (held and held(f))]
    n = workers.jobs_for(kineto_files, jobs)
    return workers.DecodePool(kineto_files, n) if n else None


def load_files(files: list[Path], comm_patterns: tuple[str, ...] = (),
               on_file: Callable[[Path], None] | None = None, step_pattern: str | None = None,
               pool: DecodePool | None = None, cache: bool = False) -> list[RankTrace]:
    """Parse already-discovered trace files (see :func:`discover`) and settle each one's rank.

    ``pool``: from :func:`start_decoding`; closed here, whatever happens. ``cache``: use the warm cache.
    """
    traces = []
    try:
        for f in files:
            if on_file:
                on_file(f)
            traces.extend(parse_file(f, tuple(comm_patterns), step_pattern, pool, cache))
    finally:
        if pool is not None:
            pool.close()
    from . import runs      # lazy: not needed before the workers start

    _settle_ranks(traces)
    rundir.attach(traces)           # world sizes from a run directory's manifest, before they are compared
    runs.check_one_run(traces)
    traces = sorted(traces, key=lambda t: (t.meta.rank, t.meta.source))
    skipped = getattr(files, "skipped", ())
    if skipped and traces:
        traces[0].meta.input_warnings.add("not-a-trace", describe_skipped(skipped), len(skipped))
    return traces


def number_by_order(meta, rank: int) -> None:
    """Give a trace that records no rank the number ``rank`` by input order, with the warning saying so."""
    meta.rank, meta.rank_rule = rank, "order"
    meta.warnings.add("rank-unknown", rank_unknown(rank))


def rank_unknown(rank: int) -> str:
    return (f"no rank recorded in the trace (distributedInfo, RANK environment) or its file name; numbered "
            f"{rank} by input order")


def _settle_ranks(traces: list[RankTrace]) -> None:
    """Ranks from the trace or file name; otherwise the next free number, with a warning."""
    taken = {t.meta.rank for t in traces if t.meta.rank is not None}
    nxt = 0
    for t in traces:
        if t.meta.rank is None:
            while nxt in taken:
                nxt += 1
            number_by_order(t.meta, nxt)
            taken.add(nxt)
    seen: dict[int, int] = {}
    for t in traces:
        seen[t.meta.rank] = seen.get(t.meta.rank, 0) + 1
    for t in traces:
        if seen[t.meta.rank] > 1:
            # Across files that is two runs, refused by runs.check_one_run; left here: processes of one
            # nsys file recording the same RANK.
            t.meta.warnings.add("duplicate-rank", f"{seen[t.meta.rank]} traces claim rank {t.meta.rank}")
