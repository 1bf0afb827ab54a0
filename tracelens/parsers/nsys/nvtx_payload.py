"""NVTX extended payloads as Nsight Systems exports them: binary blobs and their JSON text (experimental).

A payload is a small C struct described by a *schema*: entries with a name, a type and a byte offset
(``NVTX_PAYLOAD_SCHEMA_ENTRIES``). nsys stores each event's payload in ``NVTX_EVENTS.binaryData`` behind a
32-byte header ``[domainId u64][schemaId u64][payload size u64][u64]`` (not documented by NVIDIA; the one
public decoder's reading, shared reference ``nccl-nvtx-payloads.md`` §3), or, with ``--include-json``, as a
JSON object keyed by entry name. This module knows the format only, not what NCCL puts in it
(:mod:`.nccl_payloads`): headers and fields are read for all blobs at once with numpy, one gather per field
and layout, never a Python loop over blobs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

HEADER = 32
SCHEMA_ID_STATIC_START = 1 << 24
# Entry type codes of nvToolsExtPayload.h -> (bytes, signed), for 64-bit Linux (NCCL's platform): long and
# size_t are 8 bytes. A type at or above the static schema-id range is an enum schema of NCCL's: 4 bytes.
ENTRY_TYPES = {1: (1, True), 2: (1, False), 3: (2, True), 4: (2, False), 5: (4, True), 6: (4, False),
               7: (8, True), 8: (8, False), 9: (8, True), 10: (8, False), 11: (1, True), 12: (1, False),
               13: (2, True), 14: (2, False), 15: (4, True), 16: (4, False), 17: (8, True), 18: (8, False),
               22: (8, False), 23: (8, False)}
ENUM_BYTES = 4


@dataclass(frozen=True)
class PayloadLayout:
    """A static payload: its size and, per entry name, (offset, bytes, signed)."""

    size: int
    fields: tuple[tuple[str, int, int, bool], ...]

    def field(self, name: str) -> tuple[int, int, bool] | None:
        for n, off, width, signed in self.fields:
            if n == name:
                return off, width, signed
        return None


def entry_width(type_code: int) -> tuple[int, bool] | None:
    """(bytes, signed) of an entry type; enums (a schema id as type) are 4-byte ints, whatever that id also
    names: NCCL 2.25 gave its reduction-op enum the id of CommFinalize's struct schema."""
    if type_code >= SCHEMA_ID_STATIC_START:
        return ENUM_BYTES, True
    return ENTRY_TYPES.get(type_code)


def layout_of(entries: list[tuple[int, int, str, int | None]], payload_size: int | None) -> PayloadLayout | None:
    """A schema's layout from its exported entries ``(idx, type, name, offset)``; None when an entry's type
    is one a fixed layout cannot hold (strings, nested payloads) or a field would lie outside the payload.

    A missing offset means the natural place after the previous entry (the first entry's NULL is 0).
    """
    fields, end = [], 0
    for _, type_code, name, offset in sorted(entries):
        width = entry_width(int(type_code)) if type_code is not None else None
        if width is None:
            return None
        size, signed = width
        off = int(offset) if offset is not None else -(-end // size) * size
        fields.append((str(name), off, size, signed))
        end = off + size
    total = int(payload_size) if payload_size is not None else end
    if end > total:
        return None
    return PayloadLayout(total, tuple(fields))


def blob_table(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All blobs as one byte buffer: (buffer, start of each blob, length of each blob)."""
    lengths = np.fromiter((len(b) for b in blobs), np.int64, len(blobs))
    starts = np.zeros(len(blobs), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return np.frombuffer(b"".join(blobs), np.uint8), starts, lengths


def gather(buf: np.ndarray, at: np.ndarray, width: int, signed: bool) -> np.ndarray:
    """Little-endian integers of ``width`` bytes at byte positions ``at`` (every position in range), as int64.

    An unsigned 64-bit value keeps its bits (a communicator id above 2**63 reads negative: use
    ``.view(np.uint64)`` for it)."""
    if not at.size:
        return np.empty(0, np.int64)
    raw = np.ascontiguousarray(buf[at[:, None] + np.arange(width)])
    return raw.view(f"<{'i' if signed else 'u'}{width}").reshape(-1).astype(np.int64)


def headers(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(n, 3) int64: domain id, schema id, payload size of each blob; -1 where a blob is shorter than the header."""
    out = np.full((starts.size, 3), -1, np.int64)
    ok = lengths >= HEADER
    for j in range(3):
        out[ok, j] = gather(buf, starts[ok] + 8 * j, 8, False)
    return out


def read_fields(buf: np.ndarray, starts: np.ndarray, layout: PayloadLayout,
                names: dict[str, str]) -> dict[str, np.ndarray]:
    """The entries of ``layout`` named in ``names`` (entry name -> key), for blobs starting at ``starts``."""
    out = {}
    for name, off, width, signed in layout.fields:
        key = names.get(name)
        if key is not None:
            out[key] = gather(buf, starts + HEADER + off, width, signed)
    return out


def json_fields(texts: list[str], names: dict[str, str]) -> list[dict[str, object] | None]:
    """Each JSON payload's entries named in ``names`` (entry name -> key); None for text that is not a JSON
    object holding any of them. An object wrapping the entries one level down is unwrapped. Each distinct
    text is parsed once: a run repeats a few payloads thousands of times."""
    parsed: dict[str, dict | None] = {}
    out = []
    for text in texts:
        if text not in parsed:
            parsed[text] = _json_entries(text, names)
        out.append(parsed[text])
    return out


def _json_entries(text: str, names: dict[str, str]) -> dict | None:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    for _ in range(2):
        if not isinstance(doc, dict):
            return None
        found = {names[k]: v for k, v in doc.items() if k in names}
        if found:
            return found
        inner = [v for v in doc.values() if isinstance(v, dict)]
        if len(inner) != 1:
            return None
        doc = inner[0]
    return None
