"""The Nsight Systems parser: an SQLite export (or a ``.nsys-rep`` report, exported once through
:mod:`tracelens.tools.nsys_export`) -> one RankTrace per process that ran GPU work.

Its stages, in order: ``sql`` (everything that talks to SQLite: the read-only connection, feature
detection, the large queries read side by side), ``rows`` (the rows -> per-process columns: where an nsys row
becomes a model row), ``nccl_payloads`` (the collective behind each NCCL range, from NCCL's NVTX payloads;
with ``nvtx_payload``, the payload format, and ``nccl_layouts``, what NCCL puts in it per version) and
``processes`` (each process's run metadata and its RankTrace, through the shared :mod:`..assemble`).

The rest of tracelens uses the name below, and only it; it is imported on first use, like the Kineto
parser's names (:mod:`..kineto`).
"""

from ..._speed import lazy_exports

__all__ = ["parse"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "parse": "processes",             # a file -> its RankTraces, one per process that ran GPU work
})
