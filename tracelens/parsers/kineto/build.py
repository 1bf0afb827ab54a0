"""Kineto (PyTorch profiler) Chrome-trace JSON -> RankTrace.

Two stages: :mod:`.decode` reads the file into plain columns (it may run in a worker process, see
:mod:`..workers`); :func:`build` makes the tables and hands them to the shared
assembly (nesting, links, steps, classification).
"""

from __future__ import annotations

from pathlib import Path

from ...model import THREAD_COLUMNS, RankTrace, empty_table
from ...model.table import Labels, Table
from .. import assemble
from .decode import decode_file
from .event_columns import DecodedLabels, KinetoColumns


def parse(path: Path, comm_rules=(), step_pattern: str | None = None,
          decoded: KinetoColumns | None = None) -> RankTrace:
    """Parse one Kineto trace file into a RankTrace (``decoded``: its columns, when a worker decoded it)."""
    return build(decoded if decoded is not None else decode_file(path), comm_rules, step_pattern)


def build(cols: KinetoColumns, comm_rules=(), step_pattern: str | None = None) -> RankTrace:
    device = {name: _column(v) for name, v in cols.device.items()}
    host = {name: _column(v) for name, v in cols.host.items()}
    device, host, comm = assemble.drop_far_times(device, host, cols.meta, cols.comm_meta)
    device, host, comm = assemble.canonical(device, host, comm)
    steps = assemble.steps_from_host(host, step_pattern, cols.meta.warnings)
    threads = Table(cols.threads) if len(cols.threads["name"]) else empty_table(THREAD_COLUMNS)
    comm_meta = assemble.comm_meta_columns(comm)
    return assemble.build(cols.meta, device, host, steps, threads, comm_meta, comm_rules)


def _column(values):
    if isinstance(values, DecodedLabels):
        return Labels(values.codes, values.categories)
    return values
