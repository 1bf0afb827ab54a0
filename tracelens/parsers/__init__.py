"""Find trace files and parse them into RankTraces (one per file, one per rank).

Importing this package does not import pandas: discovery and the Kineto decode workers start first, so
that a fresh process decodes while it imports pandas (see :mod:`.workers`).
"""

from __future__ import annotations

import glob as _glob
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from ..errors import InputError, UsageError
from . import rundir

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


def discover(paths: Iterable[str]) -> list[Path]:
    """Expand files, directories (searched recursively) and glob patterns into trace files."""
    found: list[Path] = []
    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            found += sorted(f for f in p.rglob("*")
                            if f.is_file() and detect_format(f) and not rundir.is_side_file(f))
        elif p.is_file():
            found.append(p)
        elif any(ch in arg for ch in "*?["):
            found += sorted(Path(f) for f in _glob.glob(arg, recursive=True) if Path(f).is_file())
        else:
            raise UsageError("no such file or directory", path=arg)
    unique = list(dict.fromkeys(found))
    if not unique:
        raise UsageError("no trace files found (expected *.json, *.json.gz, *.sqlite, *.nsys-rep)",
                         path=" ".join(paths))
    # rank0.nsys-rep next to its own export rank0.sqlite is one input, read through the report (which
    # reuses the export while it is current).
    reports = {f.with_suffix("") for f in unique if f.suffix.lower() in (".nsys-rep", ".qdrep")}
    return [f for f in unique if not (f.suffix.lower() == ".sqlite" and f.with_suffix("") in reports)]


def parse_file(path: Path, comm_patterns: tuple[str, ...] = (), step_pattern: str | None = None,
               pool: DecodePool | None = None) -> list[RankTrace]:
    """The RankTraces in one file: one for a Kineto trace, one per GPU process for an nsys export.

    ``pool``: decode workers that may already hold this file's columns.
    """
    from ..classify import user_rules
    from . import kineto, nsys

    fmt = detect_format(path) or _sniff(path)
    try:
        rules = user_rules(comm_patterns)
        if step_pattern:
            re.compile(step_pattern)
    except (ValueError, re.error) as exc:
        raise UsageError(f"bad pattern: {exc}") from None
    if fmt == "nsys":
        return nsys.parse(path, rules, step_pattern)
    return [kineto.parse(path, rules, step_pattern, decoded=pool.take(path) if pool else None)]


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


def start_decoding(files: list[Path], jobs: int | None = None) -> DecodePool | None:
    """Start decoding the Kineto files among ``files`` in worker processes, when that pays (else None).

    Call it before anything imports pandas to decode while pandas loads; pass the pool to
    :func:`load_files`, which closes it.
    """
    from . import workers

    kineto_files = [f for f in files if _format_or_none(f) == "kineto"]
    n = workers.jobs_for(kineto_files, jobs)
    return workers.DecodePool(kineto_files, n) if n else None


def load_files(files: list[Path], comm_patterns: tuple[str, ...] = (),
               on_file: Callable[[Path], None] | None = None, step_pattern: str | None = None,
               pool: DecodePool | None = None) -> list[RankTrace]:
    """Parse already-discovered trace files (see :func:`discover`) and settle each one's rank.

    ``pool``: from :func:`start_decoding`; closed here, whatever happens.
    """
    traces = []
    try:
        for f in files:
            if on_file:
                on_file(f)
            traces.extend(parse_file(f, tuple(comm_patterns), step_pattern, pool))
    finally:
        if pool is not None:
            pool.close()
    _settle_ranks(traces)
    rundir.attach(traces)
    return sorted(traces, key=lambda t: (t.meta.rank, t.meta.source))


def _settle_ranks(traces: list[RankTrace]) -> None:
    """Ranks from the trace or file name; otherwise the next free number, with a warning."""
    taken = {t.meta.rank for t in traces if t.meta.rank is not None}
    nxt = 0
    for t in traces:
        if t.meta.rank is None:
            while nxt in taken:
                nxt += 1
            t.meta.rank, t.meta.rank_rule = nxt, "order"
            taken.add(nxt)
            t.meta.warnings.add("rank-unknown", f"no rank recorded in the trace (distributedInfo, RANK "
                                f"environment) or its file name; numbered {nxt} by input order")
    seen: dict[int, int] = {}
    for t in traces:
        seen[t.meta.rank] = seen.get(t.meta.rank, 0) + 1
    for t in traces:
        if seen[t.meta.rank] > 1:
            t.meta.warnings.add("duplicate-rank", f"{seen[t.meta.rank]} input files claim rank {t.meta.rank}; "
                                "they may come from different runs")
