"""The columnar trace model every parser produces and every analyzer reads.

One :class:`RankTrace` per rank. Tables are :class:`~tracelens.model.table.Table` objects (numpy columns;
``kind``, ``name`` and ``cat`` are :class:`~tracelens.model.table.Labels`, ``.to_pandas()`` gives a
DataFrame); times are int64 nanoseconds since the Unix epoch (``start_ns``/``end_ns``), link columns are
int64 row numbers into another table, and ``-1`` means "none" or "unknown" in every int64 link or size
column. Parsers fill the tables; analyzers only read them (never in place).

Tables
  device_ops   one row per device activity (kernel, memcpy, memset, sync) — see DEVICE_COLUMNS
  host_ops     CPU ops, annotations and runtime/driver calls — see HOST_COLUMNS
  collectives  one row per communication activity with what is known about its collective
  steps        the ProfilerStep host spans (step number, start, end)
  threads      host thread names
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .meta import RunMeta
from .table import Labels, Table

KINDS = ("compute", "comm", "memcpy", "memset", "sync")

DEVICE_COLUMNS = {
    "device": "int64",        # device index (Kineto pid / args.device, nsys deviceId)
    "stream": "int64",        # stream id within the device
    "kind": "category",       # one of KINDS
    "comm_kind": "object",    # nccl, rccl, ce_copy, userbuffers, custom_ar, deepep, user; None unless comm
    "rule": "object",         # the classification rule that fired (None for plain compute)
    "name": "category",       # kernel names repeat: stored once per distinct name
    "start_ns": "int64",
    "end_ns": "int64",
    "correlation": "int64",   # launch correlation id, -1 if absent
    "launch_idx": "int64",    # host_ops row of the runtime/driver call that launched it, -1 if unlinked
    "op_idx": "int64",        # host_ops row of the innermost CPU op around that launch, -1 if none
    "step": "int64",          # step number whose ProfilerStep span contains the launch, -1 if none
    "bytes": "int64",         # bytes moved by a memcpy/memset, -1 if unknown
    "config": "int64",        # launch configuration (grid, block) as an id: equal ids, equal configuration
                              # within the trace (Kineto args grid/block, nsys gridX..blockZ); -1 unknown, copies
}

HOST_COLUMNS = {
    "pid": "int64",
    "tid": "int64",
    "cat": "category",        # cpu_op, user_annotation, cuda_runtime, cuda_driver
    "name": "category",
    "start_ns": "int64",
    "end_ns": "int64",
    "correlation": "int64",   # runtime/driver calls only, -1 otherwise
    "external_id": "int64",
    "parent": "int64",        # host_ops row of the enclosing event on the same thread, -1 at top level
    "comm_kind": "object",    # "gloo" for gloo:* collectives on worker threads, else None
    "shapes": "int64",        # the op's input shapes (Kineto ``Input Dims``) as an id: equal ids, equal shapes
                              # within the trace; -1 none recorded
}

COLLECTIVE_COLUMNS = {
    "device_idx": "int64",    # device_ops row of the comm activity (-1 for CPU-only gloo collectives)
    "host_idx": "int64",      # host_ops row that carried the metadata (record_param_comms, nccl:*, gloo:*, NCCL API)
    "op": "object",           # all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, broadcast, ...
    "dtype": "object",
    "in_nelems": "int64",
    "out_nelems": "int64",
    "bytes": "int64",         # message size S as nccl-tests defines it, -1 when unknown
    "group_size": "int64",
    "pg_name": "object",
    "pg_desc": "object",
    "seq": "int64",
    "root": "int64",          # root rank of a rooted collective (broadcast, reduce, gather, scatter), -1 if unknown
    "peer": "int64",          # the other rank of a lone send or receive, -1 if unknown
    "redop": "object",        # reduction: sum, prod, max, min, avg, custom; None if unknown or not a reduction
}

STEP_COLUMNS = {"step": "int64", "start_ns": "int64", "end_ns": "int64"}
THREAD_COLUMNS = {"pid": "int64", "tid": "int64", "name": "object"}


def empty_table(columns: dict[str, str]) -> Table:
    return Table({c: np.empty(0, dtype=np.int64) if t == "int64" else Labels(np.empty(0, np.int64), [])
                  if t == "category" else np.empty(0, dtype=object) for c, t in columns.items()})


@dataclass
class RankTrace:
    meta: RunMeta
    device_ops: Table
    host_ops: Table
    collectives: Table
    steps: Table
    threads: Table

    @property
    def rank(self) -> int | None:
        return self.meta.rank

    def streams(self) -> dict[tuple[int, int], Table]:
        """Device activity split per (device, stream) lane, each sorted by start."""
        ops = self.device_ops.sort_by("start_ns")
        dev, stream = ops["device"], ops["stream"]
        lanes = sorted(set(zip(dev.tolist(), stream.tolist())))
        return {(d, s): ops.take(np.flatnonzero((dev == d) & (stream == s))) for d, s in lanes}

    def validate(self) -> None:
        """Check the invariants parsers promise; raises :class:`ModelError` (a parser bug, not a user mistake).

        Real checks, not ``assert``: they must hold under ``python -O`` too.
        """
        for table, frame, cols in (("device_ops", self.device_ops, DEVICE_COLUMNS),
                                   ("host_ops", self.host_ops, HOST_COLUMNS),
                                   ("collectives", self.collectives, COLLECTIVE_COLUMNS),
                                   ("steps", self.steps, STEP_COLUMNS)):
            missing = set(cols) - set(frame.columns)
            if missing:
                raise ModelError(f"{table}: missing columns {sorted(missing)}")
            for c, t in cols.items():
                v = frame[c]
                if t == "int64" and v.dtype != np.int64:
                    raise ModelError(f"{table}.{c} is {v.dtype}, expected int64")
                if t == "category" and not isinstance(v, Labels):
                    raise ModelError(f"{table}.{c} is {v.dtype}, expected categorical")
        for table, frame in (("device_ops", self.device_ops), ("host_ops", self.host_ops)):
            if not (frame["end_ns"] >= frame["start_ns"]).all():
                raise ModelError(f"{table}: an event ends before it starts")
        kind = self.device_ops["kind"]
        if not (kind.codes >= 0).all():
            raise ModelError("device_ops: a row has no kind")
        unknown = set(kind.unique()) - set(KINDS)
        if unknown:
            raise ModelError(f"device_ops: unknown kinds {sorted(unknown)}")


class ModelError(Exception):
    """A parser broke the model's invariants: a bug in tracelens, reported with its traceback."""
