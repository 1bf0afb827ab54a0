"""Find trace files and parse them into RankTraces (one per file, one per rank)."""

from __future__ import annotations

import glob as _glob
from pathlib import Path
from typing import Callable, Iterable

from ..classify import user_rules
from ..errors import InputError, UsageError
from ..model import RankTrace
from . import kineto

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
            found += sorted(f for f in p.rglob("*") if f.is_file() and detect_format(f))
        elif p.is_file():
            found.append(p)
        elif any(ch in arg for ch in "*?["):
            found += sorted(Path(f) for f in _glob.glob(arg, recursive=True) if Path(f).is_file())
        else:
            raise UsageError("no such file or directory", path=arg)
    unique = list(dict.fromkeys(found))
    if not unique:
        raise UsageError("no trace files found (expected *.json, *.json.gz)", path=" ".join(paths))
    return unique


def parse_file(path: Path, comm_patterns: tuple[str, ...] = ()) -> RankTrace:
    fmt = detect_format(path) or "kineto"
    if fmt == "nsys":
        raise InputError("Nsight Systems input is not supported by this version yet; export a PyTorch "
                         "profiler trace (.json/.json.gz) instead", path=str(path))
    try:
        rules = user_rules(comm_patterns)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return kineto.parse(path, rules)


def load(paths: Iterable[str] | str, comm_patterns: tuple[str, ...] = (),
         on_file: Callable[[Path], None] | None = None) -> list[RankTrace]:
    """Parse every trace under ``paths`` and settle each one's rank."""
    if isinstance(paths, (str, Path)):
        paths = [str(paths)]
    return load_files(discover([str(p) for p in paths]), comm_patterns, on_file)


def load_files(files: list[Path], comm_patterns: tuple[str, ...] = (),
               on_file: Callable[[Path], None] | None = None) -> list[RankTrace]:
    """Parse already-discovered trace files (see :func:`discover`) and settle each one's rank."""
    traces = []
    for f in files:
        if on_file:
            on_file(f)
        traces.append(parse_file(f, tuple(comm_patterns)))
    _settle_ranks(traces)
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
            t.meta.warnings.add("rank-unknown", f"no distributedInfo.rank and no rank in the file name; "
                                f"numbered {nxt} by input order")
    seen: dict[int, int] = {}
    for t in traces:
        seen[t.meta.rank] = seen.get(t.meta.rank, 0) + 1
    for t in traces:
        if seen[t.meta.rank] > 1:
            t.meta.warnings.add("duplicate-rank", f"{seen[t.meta.rank]} input files claim rank {t.meta.rank}; "
                                "they may come from different runs")
