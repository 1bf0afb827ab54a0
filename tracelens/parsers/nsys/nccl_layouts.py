"""What NCCL puts in its NVTX payloads, per version (shared reference ``nccl-nvtx-payloads.md`` §1–§2).

Tables only: the API ranges and what each call means (canonical op, payload layout family, whether its
count is per rank), the schema entry names the decoder reads, and the reference's layouts for exports
that carry no schema rows. Used by :mod:`.nccl_payloads`.
"""

from __future__ import annotations

import re

from . import nvtx_payload as nvp

NCCL_API = re.compile(r"^nccl[A-Z]\w*$")
# Range name (after "nccl", lower case) -> canonical op; family of its payload layout; per-rank count.
CALLS = {"allreduce": ("all_reduce", "reduce_all", False), "reducescatter": ("reduce_scatter", "reduce_all", True),
          "allgather": ("all_gather", "sized", True), "alltoall": ("all_to_all", "sized", True),
          "broadcast": ("broadcast", "rooted", False), "bcast": ("broadcast", "rooted", False),
          "gather": ("gather", "rooted", True), "scatter": ("scatter", "rooted", True),
          "reduce": ("reduce", "reduce", False), "send": ("send", "p2p", False), "recv": ("recv", "p2p", False)}
OPS = sorted({op for op, _, _ in CALLS.values()})
P2P = (OPS.index("send"), OPS.index("recv"))
COMM_CALL = re.compile(r"^comm(?:initrank\w*|initall|destroy|abort|revoke|finalize|split|shrink|grow)$")
# Schema entry names (verbatim, every NCCL version) -> field.
FIELDS = {"NCCL communicator ID": "comm", "Message size [bytes]": "size", "Bytes": "size", "Root": "root",
          "Peer rank": "peer", "Reduction operation": "redop", "No. of ranks": "nranks"}
REDOPS = ("sum", "prod", "max", "min", "avg")          # ncclRedOp_t; larger values are user-created ops

INT, SIZE_T, ENUM = 5, 22, nvp.SCHEMA_ID_STATIC_START   # entry types: int, size_t, NCCL's op enum (4 B)
_C, _S = ("NCCL communicator ID", 18), ("Message size [bytes]", SIZE_T)
_OP, _ROOT, _PEER = ("Reduction operation", ENUM), ("Root", INT), ("Peer rank", INT)
_BYTES = ("Bytes", SIZE_T)


def _ref(*entries: tuple[tuple[str, int], int]) -> list:
    return [(i, t, n, off) for i, ((n, t), off) in enumerate(entries)]


# The reference's layouts (§2) by (family, payload size): 2.25 and later carry the communicator id first.
REFERENCE = {
    ("sized", 16): _ref((_C, 0), (_S, 8)), ("sized", 8): _ref((_S, 0),),
    ("reduce_all", 24): _ref((_C, 0), (_S, 8), (_OP, 16)), ("reduce_all", 16): _ref((_S, 0), (_OP, 8)),
    ("rooted", 24): _ref((_C, 0), (_S, 8), (_ROOT, 16)), ("rooted", 16): _ref((_BYTES, 0), (_ROOT, 8)),
    ("reduce", 24): _ref((_C, 0), (_S, 8), (_ROOT, 16), (_OP, 20)),
    ("reduce", 16): _ref((_S, 0), (_ROOT, 8), (_OP, 12)),
    ("p2p", 24): _ref((_C, 0), (_S, 8), (_PEER, 16)), ("p2p", 16): _ref((_BYTES, 0), (_PEER, 8)),
    ("comm", 24): _ref((_C, 0), (("No. of ranks", INT), 8), (("Rank", INT), 12), (("CUDA device", INT), 16)),
    ("comm", 12): _ref((("Rank", INT), 0), (("No. of ranks", INT), 4), (("CUDA device", INT), 8)),
    ("comm", 8): _ref((_C, 0),),
}
REF_LAYOUTS = {k: nvp.layout_of(v, k[1]) for k, v in REFERENCE.items()}
