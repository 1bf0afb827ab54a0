"""Nsight Systems exports, stage 3 of 4: NCCL payload notes, why NCCL ranges give no collective sizes.

Apart because it is the one place that looks at NCCL's NVTX payloads: a decoder of their sizes, once an
export with payloads is at hand to check it against, belongs here and nowhere else.
"""

from __future__ import annotations

import numpy as np

from .nsys_read import _PAYLOAD_ENTRIES, _Db, _has_payload_schemas


def _nccl_payload_notes(db: _Db, q: dict) -> dict[int | None, list[tuple[str, str, int]]]:
    """Per process (None: all of them), why its NCCL ranges give no collective sizes.

    NCCL records each call's message size in an NVTX payload (schema entry "Message size [bytes]"). An
    export keeps payloads only with ``--include-blobs true``, and tracelens does not decode their binary
    layout (no export with blobs has been available to check a decoder against), so bytes stay unknown.
    The NCCL ranges are those of the domains with such a schema, counted on the NVTX rows already read.
    """
    if "nvtx" not in q or not _has_payload_schemas(db):
        return {}
    sized = [d for (d,) in db.rows(f"SELECT DISTINCT domainId FROM {_PAYLOAD_ENTRIES} "
                                   "WHERE name LIKE 'Message size%'") if isinstance(d, int)]
    _, _, gtid, domain, blob, _ = q["nvtx"].result()
    nccl = np.isin(domain, sized)
    procs, total = np.unique(gtid[nccl] >> 24, return_counts=True)
    with_blob = np.bincount(np.searchsorted(procs, gtid[nccl & (blob != 0)] >> 24), minlength=procs.size)
    out: dict[int | None, list[tuple[str, str, int]]] = {}
    for proc, n, blobs in zip(procs.tolist(), total.tolist(), with_blob.tolist()):
        key = proc or None                 # no thread recorded: the note goes to every process
        if not blobs:
            out[key] = [("nsys-nccl-payload-unavailable", "NCCL ranges carry their message size in NVTX payloads, "
                         "but the export was made without them (nsys export --include-blobs true); collective "
                         "sizes are unknown", int(n))]
        else:
            out[key] = [("nsys-nccl-payload-undecoded", "NCCL ranges carry NVTX binary payloads, which tracelens "
                         "does not decode yet; collective sizes are unknown", int(blobs))]
    return out
