"""Find trace files and parse them into RankTraces (one per file, one per rank).

Importing this package imports no parser: a fresh process finds its inputs and starts its workers first,
so that they work while it imports the rest (see :mod:`tracelens.pool`).
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from .. import cache, pool
from ..errors import InputError, UsageError
from ..model.annotation import OVERLAY_HEAD
from ..model.rundir_layout import BOOTSTRAP, NCCL_LOGS
from . import rundir, runs, walk, workers
from .nccl import (INSPECTOR_FOLDER, LOG_SUFFIXES, PROMETHEUS_SNAPSHOT, maybe_log, sniff, sniff_inspector,
                   sniff_prometheus)
from .notes import describe_outside, describe_skipped

if TYPE_CHECKING:
    from ..model import RankTrace
    from ..options import ReportOptions
    from .kineto import Halves
    from .workers import Decoding

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
    in a folder that lead outside it, not read; ``inspector_logs``: the NCCL Inspector output among the
    inputs. It passes through callers that only need the paths unchanged."""

    def __init__(self, files=(), skipped=(), nccl_logs=(), logs_skipped=(), outside=(), inspector_logs=()):
        super().__init__(files)
        self.skipped: list[tuple[Path, str]] = list(skipped)
        self.nccl_logs: list[Path] = list(nccl_logs)
        self.inspector_logs: list[Path] = list(inspector_logs)
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
    none is listed in ``logs_skipped``. NCCL Inspector output (its first line says so, gzipped or not) is an
    Inspector log wherever it is; a file in an Inspector dump folder (``nccl-inspector-*``) that is not is
    listed in ``logs_skipped``. A link found in a directory that leads outside it (a file or a
    folder) is not followed: listed in ``outside``. No traces and no logs is a usage error.
    """
    found: list[Path] = []
    named: set[Path] = set()
    logs: list[Path] = []
    logs_skipped: list[tuple[Path, str]] = []
    outside: list[tuple[Path, str]] = []
    inspector: list[Path] = []

    def in_dump(f: Path) -> bool:
        return f.parent.name.startswith(INSPECTOR_FOLDER)

    def inspected(f: Path) -> bool:
        """An Inspector log (kept), or a file of an Inspector folder that is not one (skipped); else False."""
        if (in_dump(f) or maybe_log(f) or f.name.lower().endswith(".gz")) and sniff_inspector(f):
            inspector.append(f)
            return True
        if sniff_prometheus(f):
            logs_skipped.append((f, PROMETHEUS_SNAPSHOT))
            return True
        if in_dump(f):
            logs_skipped.append((f, "not NCCL Inspector output"))
            return True
        return False

    def other(f: Path) -> bool:
        """Sort a file that is not a trace by name: an NCCL log, a skipped log, or (False) neither."""
        if inspected(f):
            return True
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
                if detect_format(f) or f.parent.name == BOOTSTRAP or inspected(f) or not maybe_log(f):
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
    inspector = list(dict.fromkeys(inspector))
    if not unique and not logs and not inspector:
        extra = "; ".join([describe_skipped(s, what=w) for s, w in ((skipped, "traces"), (logs_skipped, "NCCL logs"))
                           if s] + [describe_outside(outside)] * bool(outside))
        raise UsageError("no trace files found (expected *.json, *.json.gz, *.sqlite, *.nsys-rep) and no NCCL "
                         "log (NCCL_DEBUG=INFO output)" + (f"; {extra}" if extra else ""), path=" ".join(paths))
    # rank0.nsys-rep next to its own export rank0.sqlite is one input, read through the report (which
    # reuses the export while it is current).
    reports = {f.with_suffix("") for f in unique if f.suffix.lower() in (".nsys-rep", ".qdrep")}
    return Inputs([f for f in unique if not (f.suffix.lower() == ".sqlite" and f.with_suffix("") in reports)],
                  skipped, logs, logs_skipped, outside, inspector)


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
                    if text.startswith(OVERLAY_HEAD):
                        return "an overlay written by tracelens annotate (no trace of its own)"
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
    from .kineto import Members     # lazy: ISA-L, for a gzip file only

    members = Members(fh.read, size, first=data)
    limit = size            # a small first piece: the key shows in it, and inflating costs by the byte out
    while text := members.inflate(limit):
        limit = 4 * size
        yield text


def parse_file(path: Path, options: ReportOptions, decoding: Decoding | None = None) -> list[RankTrace]:
    """The RankTraces in one file: one for a Kineto trace, one per GPU process for an nsys export.

    ``decoding``: workers that may already hold this file's columns; the warm cache's tables layer is read
    and filled here when ``options.cache``.
    """
    # lazy: the model needs numpy, which a report imports only once its workers are forked
    from ..model.classify import user_rules

    fmt = detect_format(path) or _sniff(path)
    try:
        rules = user_rules(options.comm_patterns)
        if options.step_pattern:
            re.compile(options.step_pattern)
    except (ValueError, re.error) as exc:
        raise UsageError(f"bad pattern: {exc}") from None
    k = cache.TABLES.key(path, cache_options(options)) if options.cache else None
    hit = cache.TABLES.get(k) if k is not None else None
    if hit is not None:
        return hit
    # Only the parser the file needs: a warm run needs neither, and a Kineto report no nsys reader.
    if fmt == "nsys":
        # lazy: SQLite and the nsys reader, for nsys inputs only
        from . import nsys

        traces = nsys.parse(path, rules, options.step_pattern)
    else:
        # lazy: numpy and msgspec, after the workers are forked
        from . import kineto

        traces = [kineto.parse(path, rules, options.step_pattern,
                               decoded=decoding.take(path) if decoding else None)]
    if k is not None:
        cache.TABLES.put(k, traces)     # before the ranks are settled: the entry is the file's alone
    return traces


def cache_options(options: ReportOptions) -> tuple:
    """What besides the file decides what parsing it gives: the patterns, and the inflate limit (a cached
    file must not get past a lower one)."""
    # lazy: the Kineto package's constant, without its decoder
    from .kineto import MAX_INFLATE_ENV

    return (options.comm_patterns, options.step_pattern, os.environ.get(MAX_INFLATE_ENV, "").strip())


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


def start_decoding(files: list[Path], options: ReportOptions) -> Decoding | Halves | None:
    """Workers decoding the Kineto files among ``files`` that the warm cache does not hold, when that pays
    (:func:`tracelens.pool.plan`; else None): one worker per file, or for one file a worker decoding half
    of it. Call it before the parsers and analyzers are imported, and pass it to :func:`load_files`, which
    closes it."""
    held = (lambda f: cache.TABLES.has(cache.TABLES.key(f, cache_options(options)))) if options.cache else None
    kineto_files = [f for f in files if _format_or_none(f) == "kineto" and not (held and held(f))]
    plan = pool.plan(kineto_files, options.jobs, beside=False)
    if plan.halves:
        # lazy: the two-core decode of one Kineto file, for such a load only
        from .kineto import Halves

        halves = Halves(Path(kineto_files[0]))
        halves.begin()
        return halves
    if not plan.workers:
        return None
    if plan.fork:
        # lazy: numpy and msgspec, loaded before the fork so that every worker starts with them
        from .kineto import decode_file  # noqa: F401
    return workers.Decoding(kineto_files, plan)


def load_files(files: Inputs, options: ReportOptions, on_file: Callable[[Path, int, int], None] | None = None,
               decoding: Decoding | None = None) -> list[RankTrace]:
    """Parse discovered trace files (see :func:`discover`) and settle their ranks (:func:`.runs.settle`).
    ``decoding``: from :func:`start_decoding`; closed here, whatever happens."""
    read = []
    try:
        for n, f in enumerate(files, 1):
            if on_file:
                on_file(f, n, len(files))
            read.append((f, runs.claim_ranks(parse_file(f, options, decoding))))
    finally:
        if decoding is not None:
            decoding.close()

    def renumber(path, traces, given: dict[int, int]):
        for k, rank in given.items():
            runs.number_by_order(traces[k].meta, rank)
        rundir.attach([traces[k] for k in given])
        return traces

    def note(first, text: str, count: int) -> None:
        first.meta.input_warnings.add("not-a-trace", text, count)

    return runs.settle(read, getattr(files, "skipped", ()), renumber, note)
