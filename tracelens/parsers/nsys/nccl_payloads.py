"""Nsight Systems exports, stage 3 of 4: the collective behind each NCCL range, from NCCL's NVTX payloads.

NCCL (2.16.2 and later) marks each API call with an NVTX range (``ncclAllReduce``, ``ncclSend``, ...) in
its own domain and attaches a payload: communicator id, message size, reduction op, root or peer (shared
reference ``nccl-nvtx-payloads.md``). The layouts come from the export's schema rows, entries picked by
name, else from the reference's per-version layouts (by call and payload size). Decoding is experimental:
the blob header is not documented by NVIDIA, so every report that uses it says so in a warning.

What comes out describes NCCL ranges, not kernels: each decoded call, and each ``ncclGroupEnd`` with the
calls of its group (kernels of grouped calls are launched there). :mod:`..assemble` links kernels to the
nearest such range. Sizes follow nccl-tests' ``S``: calls whose count is per rank (all-gather,
reduce-scatter, all-to-all, gather, scatter) are multiplied by the communicator's size, known when the
export holds a payload with that communicator's "No. of ranks" (its init, destroy or abort).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import nvtx_payload as nvp
from ...model.columns import distinct, unique_rows
from .nccl_layouts import CALLS, COMM_CALL, FIELDS, NCCL_API, OPS, P2P, REDOPS, REF_LAYOUTS
from .sql import (NVTX, NVTX_BLOBS, PAYLOAD_ENTRIES, PAYLOAD_SCHEMAS, ExportDb, arrow_ints, arrow_strings,
                  numpy_of)

# Row status of an NCCL range's payload.
NONE, DECODED, UNDECODABLE, UNKNOWN = 0, 1, 2, 3


@dataclass
class NcclRanges:
    """What the NCCL ranges of an export say: per described NVTX row (its position in the NVTX query),
    the collective, and per process (None: all) the notes for the report's warnings."""

    rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    notes: dict[int | None, list[tuple[str, str, int]]] = field(default_factory=dict)

    def comm_meta(self, nvtx_row: np.ndarray) -> dict | None:
        """COMM_META columns (table "nvtx") for one process's host rows, given each row's NVTX position
        (-1 for rows that are not NVTX ranges)."""
        if not self.rows.size:
            return None
        at = np.minimum(np.searchsorted(self.rows, nvtx_row), self.rows.size - 1)
        hit = (nvtx_row >= 0) & (self.rows[at] == nvtx_row)
        if not hit.any():
            return None
        pick = at[hit]
        out = {c: v[pick] for c, v in self.columns.items()}
        out["row"], out["table"] = np.flatnonzero(hit), np.full(pick.size, "nvtx", dtype=object)
        return out


def nccl_ranges(db: ExportDb, q: dict) -> NcclRanges:
    """Decode the payloads of every NCCL range read by the NVTX query (all processes at once)."""
    if "nvtx" not in q or "nvtx_payload" not in q:
        return NcclRanges()
    start, _, gtid, domain, present, rowid, name = q["nvtx"].result()
    present = present.astype(bool)
    # Only ranges outside the default domain can be NCCL's: their names are few, torch's are many and
    # nearly all distinct (", op_id = N").
    outside = np.flatnonzero(domain > 0)
    text = name if isinstance(name, pa.Array) else arrow_strings(name)
    names = pc.dictionary_encode(text.take(arrow_ints(outside)))
    texts = [str(n) for n in names.dictionary.to_pylist()]
    is_api = np.array([bool(NCCL_API.match(n)) for n in texts] + [False])
    codes = numpy_of(names.indices)
    nccl = outside[is_api[codes]]
    codes = codes[is_api[codes]]
    if not nccl.size:
        return NcclRanges()
    calls = [n[4:].lower() if is_api[i] else "" for i, n in enumerate(texts)] + [""]
    r = _Rows(nccl, start[nccl], gtid[nccl], domain[nccl], codes, calls)
    schemas = _schemas(db)
    if present[nccl].any():
        _decode(db, r, rowid[nccl], present[nccl], schemas, q.get("nvtx_blobs"))
    out = NcclRanges()
    if (r.status == DECODED).any():
        _describe(r, out)
    out.notes = _notes(db, r, schemas, bool(present[nccl].any()))
    return out


class _Rows:
    """The NCCL ranges of the export as columns, and their decoded fields (-1: unknown)."""

    def __init__(self, idx, start, gtid, domain, codes, calls):
        self.idx, self.start, self.gtid, self.domain = idx, start, gtid, domain
        n = idx.size
        # Per distinct range name once, then per row through its code.
        self.calls, self.code = calls, codes
        self.op = np.array([OPS.index(CALLS[c][0]) if c in CALLS else -1 for c in calls])[codes]
        self.per_rank = np.array([c in CALLS and CALLS[c][2] for c in calls])[codes]
        self.group_delta = np.array([(c == "groupstart") - (c == "groupend") for c in calls], np.int64)[codes]
        self.status = np.zeros(n, np.int8)
        self.has_comm = np.zeros(n, bool)
        self.comm = np.zeros(n, np.uint64)
        self.f = {k: np.full(n, -1, np.int64) for k in ("size", "root", "peer", "redop", "nranks")}
        # Calls with a per-rank size and no known rank count; groups that mix ops or communicators.
        self.unsized, self.mixed = np.zeros(n, bool), np.zeros(n, bool)

    def set(self, rows: np.ndarray, values: dict[str, np.ndarray]) -> None:
        for key, v in values.items():
            if key == "comm":
                self.comm[rows], self.has_comm[rows] = np.asarray(v, np.int64).view(np.uint64), True
            elif key in self.f:
                self.f[key][rows] = v


def _schemas(db: ExportDb) -> dict[tuple[int, int], nvp.PayloadLayout | None]:
    """(domain, schema id) -> layout from the export's schema rows, deduplicated (they repeat once per
    process); None for a schema whose rows disagree or that a fixed layout cannot hold."""
    if not db.has(PAYLOAD_ENTRIES) or not {"domainId", "schemaId", "idx", "type", "name", "offset"} <= \
            db.columns(PAYLOAD_ENTRIES):
        return {}
    sizes: dict[tuple[int, int], set] = {}
    if db.has(PAYLOAD_SCHEMAS) and {"domainId", "schemaId", "payloadSize"} <= db.columns(PAYLOAD_SCHEMAS):
        for d, s, size in db.rows(f'SELECT DISTINCT "domainId", "schemaId", "payloadSize" FROM {PAYLOAD_SCHEMAS}'):
            sizes.setdefault((d, s), set()).add(size)
    entries: dict[tuple[int, int], dict[int, set]] = {}
    for d, s, i, t, n, off in db.rows(f'SELECT DISTINCT "domainId", "schemaId", "idx", "type", "name", "offset" '
                                      f"FROM {PAYLOAD_ENTRIES}"):
        entries.setdefault((d, s), {}).setdefault(i, set()).add((t, n, off if off is not None or i else 0))
    out: dict[tuple[int, int], nvp.PayloadLayout | None] = {}
    for key, by_idx in entries.items():
        size = sizes.get(key, {None})
        if len(size) > 1 or any(len(v) > 1 for v in by_idx.values()):
            out[key] = None
            continue
        rows = [(i, *next(iter(v))) for i, v in by_idx.items()]
        out[key] = nvp.layout_of(rows, next(iter(size)))
    return out


def _decode(db: ExportDb, r: _Rows, rowid: np.ndarray, present: np.ndarray, schemas: dict, blobs) -> None:
    """Fetch the payloads of the NCCL ranges that have one and decode them into ``r``: blobs first, then the
    JSON text of the rows without a blob."""
    cols = db.columns(NVTX)
    domains = ", ".join(str(int(d)) for d in distinct(r.domain[present]).tolist())
    where = f'n."domainId" IN ({domains}) AND n."eventType" IN (59, 60)'
    order = np.argsort(rowid, kind="stable")

    def ours(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions among the NCCL ranges, which fetched rows are NCCL ranges of the NVTX query)."""
        at = order[np.minimum(np.searchsorted(rowid[order], ids), order.size - 1)] if order.size else ids
        return at, rowid[at] == ids

    seen = np.zeros(r.idx.size, bool)
    if "binaryData" in cols:
        # Read beside the other tables unless the export said it holds none (and then it may still).
        ids, buf, lengths = blobs.result() if blobs is not None else db.blobs(NVTX_BLOBS)
        at, mine = ours(ids)
        starts = np.zeros(ids.size, np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        seen[at[mine]] = True
        if mine.any():
            _decode_blobs(r, at[mine], buf, starts[mine], lengths[mine], schemas)
    if not (present & ~seen).any():
        return
    text, join = ('n."jsonText"' if "jsonText" in cols else "NULL"), ""
    if "jsonTextId" in cols and db.has("StringIds"):
        text, join = f'coalesce({text}, j.value)', 'LEFT JOIN StringIds j ON j.id = n."jsonTextId"'
    fetched = db.rows(f"SELECT n.rowid, {text} FROM {NVTX} n {join} WHERE {where} AND {text} IS NOT NULL")
    at, mine = ours(np.fromiter((row[0] for row in fetched), np.int64, len(fetched)))
    keep = mine & ~seen[at]
    if keep.any():
        _decode_json(r, at[keep], [row[1] for row, k in zip(fetched, keep.tolist()) if k])


def _decode_blobs(r: _Rows, rows: np.ndarray, buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                  schemas: dict) -> None:
    head = nvp.headers(buf, starts, lengths)
    r.status[rows[head[:, 0] < 0]] = UNDECODABLE     # shorter than the header
    ok = np.flatnonzero(head[:, 0] >= 0)
    by_id: dict[int, set] = {}
    for (d, s), lay in schemas.items():
        by_id.setdefault(s, set()).add(lay)
    # A handful of (domain, schema, size, call) combinations: choose each one's layout once.
    combos, first, inverse = unique_rows(np.stack([r.domain[rows[ok]], head[ok, 1], head[ok, 2],
                                                   r.code[rows[ok]]], axis=1))
    by_combo = np.argsort(inverse, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(inverse, minlength=len(combos)))]
    for j, (dom, sid, size, code) in enumerate(combos.tolist()):
        sel = ok[by_combo[bounds[j]:bounds[j + 1]]]
        lay, known = _layout(schemas, by_id, dom, sid, size, r.calls[code])
        if lay is None:
            r.status[rows[sel]] = UNDECODABLE if known else UNKNOWN
            continue
        whole = lengths[sel] >= nvp.HEADER + lay.size
        r.status[rows[sel[~whole]]] = UNDECODABLE     # truncated: the header promises more than the blob holds
        sel = sel[whole]
        r.set(rows[sel], nvp.read_fields(buf, starts[sel], lay, FIELDS))
        r.status[rows[sel]] = DECODED


def _layout(schemas: dict, by_id: dict, dom: int, sid: int, size: int,
            call: str) -> tuple[nvp.PayloadLayout | None, bool]:
    """(layout, schema known) of one payload kind: the export's schema if it has it, else the reference's
    layout for the call with that payload size. A known layout whose size differs from the header's is no
    layout (the blob is not what the schema says)."""
    lay = schemas.get((dom, sid))
    if lay is None and len(by_id.get(sid, ())) == 1:  # a domain id that differs between processes
        lay = next(iter(by_id[sid]))
    if lay is not None:
        return (lay, True) if lay.size == size else (None, True)
    family = CALLS[call][1] if call in CALLS else "comm" if COMM_CALL.match(call) else None
    ref = REF_LAYOUTS.get((family, size))
    return ref, False


def _decode_json(r: _Rows, rows: np.ndarray, texts: list[str]) -> None:
    values: dict[str, list] = {k: [] for k in dict.fromkeys(FIELDS.values())}
    for found in nvp.json_fields(texts, FIELDS):
        ints = {k: _json_int(k, v) for k, v in (found or {}).items()}
        for k, column in values.items():
            column.append(ints.get(k))
    ok = np.array([any(values[k][j] is not None for k in values) for j in range(len(texts))], bool)
    r.status[rows] = np.where(ok, DECODED, UNDECODABLE)
    for k, v in values.items():
        has = np.array([x is not None for x in v], bool) & ok
        if has.any():
            r.set(rows[has], {k: np.array([x for x, h in zip(v, has.tolist()) if h], np.int64)})


def _json_int(key: str, v) -> int | None:
    """An entry's JSON value as an int: numbers, numeric text (``"0x1f"`` too), op names (``"ncclSum"``)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v - (1 << 64) if v >= 1 << 63 else v
    if isinstance(v, str):
        s = v.strip().lower()
        if key == "redop" and s.removeprefix("nccl") in REDOPS:
            return REDOPS.index(s.removeprefix("nccl"))
        try:
            return _json_int(key, int(s, 0))
        except ValueError:
            return None
    return None


def _describe(r: _Rows, out: NcclRanges) -> None:
    """Per NCCL call with a decoded payload, and per outermost ``ncclGroupEnd`` of a group of calls, the
    collective it launches; groups that mix ops or communicators are described without op or size."""
    group = _comm_sizes(r)
    per_rank = r.per_rank
    size = np.where(per_rank & (r.f["size"] >= 0), np.where(group > 0, r.f["size"] * group, -1), r.f["size"])
    call_rows = (r.op >= 0) & (r.status == DECODED)
    r.unsized = call_rows & per_rank & (r.f["size"] >= 0) & (group <= 0)
    member, ends = _groups(r)
    # Calls inside a group launch nothing themselves: only their group's end is described.
    call_rows &= member < 0
    desc = {"idx": r.idx[call_rows], "op": r.op[call_rows], "size": size[call_rows], "group": group[call_rows],
            "comm": np.where(r.has_comm, r.comm, 0)[call_rows], "has_comm": r.has_comm[call_rows],
            "root": r.f["root"][call_rows], "peer": r.f["peer"][call_rows], "redop": r.f["redop"][call_rows]}
    g = _group_desc(r, member, ends, size, group)
    r.mixed = g.pop("mixed")
    both = {k: np.concatenate([desc[k], g[k]]) for k in desc}
    order = np.argsort(both["idx"], kind="stable")
    both = {k: v[order] for k, v in both.items()}
    out.rows = both["idx"]
    comms, comm_code = np.unique(both["comm"], return_inverse=True)       # a run has a few communicators
    pg = np.array([f"0x{c:x}" for c in comms.tolist()] + [None], object)
    out.columns = {
        "collective": np.array(OPS + [None], object)[both["op"]],               # op -1 reads the None
        "bytes": both["size"], "group_size": both["group"], "root": both["root"], "peer": both["peer"],
        "pg_name": pg[np.where(both["has_comm"], comm_code.reshape(-1), -1)],
        "redop": np.array(list(REDOPS) + ["custom"] * 251 + [None], object)[np.minimum(both["redop"], 255)]}


def _comm_sizes(r: _Rows) -> np.ndarray:
    """Each range's communicator's rank count (-1: unknown), from any payload carrying both (init,
    destroy, abort); the first one seen wins."""
    out = np.full(r.idx.size, -1, np.int64)
    has = r.has_comm & (r.f["nranks"] > 0)
    if not has.any():
        return out
    known, first = np.unique(r.comm[has], return_index=True)
    sizes = r.f["nranks"][has][first]
    at = np.minimum(np.searchsorted(known, r.comm), known.size - 1)
    hit = r.has_comm & (known[at] == r.comm)
    out[hit] = sizes[at[hit]]
    return out


def _groups(r: _Rows) -> tuple[np.ndarray, np.ndarray]:
    """(group number of each call inside an ncclGroupStart/End pair on its thread, else -1; the rows of the
    outermost ncclGroupEnd of each group, by group number). Nesting depth never drops below 0: a group
    opened before the capture began is no group."""
    order = np.lexsort((r.start, r.gtid))
    delta = r.group_delta[order]
    depth = np.zeros(order.size, np.int64)
    gt = r.gtid[order]
    bounds = np.flatnonzero(np.diff(gt)) + 1
    for a, b in zip(np.r_[0, bounds].tolist(), np.r_[bounds, order.size].tolist()):
        walk = np.cumsum(delta[a:b])
        depth[a:b] = walk - np.minimum.accumulate(np.minimum(walk, 0))
    before = np.r_[0, depth[:-1]]
    before[bounds] = 0
    opens = (delta > 0) & (before == 0)
    number = np.cumsum(opens) - 1
    member = np.full(r.idx.size, -1, np.int64)
    inside = (before > 0) & (r.op[order] >= 0)
    member[order[inside]] = number[inside]
    closes = (delta < 0) & (before == 1)
    ends = np.full(int(opens.sum()), -1, np.int64)
    ends[number[closes]] = order[closes]
    return member, ends


def _group_desc(r: _Rows, member: np.ndarray, ends: np.ndarray, size: np.ndarray, group: np.ndarray) -> dict:
    """One description per closed group with decoded calls: its op and comm when all calls share them (a
    group of sends and receives has no op of its own: the enclosing torch range or the kernel names it), the
    sum of its calls' sizes (sends only, when it has sends), root/peer/redop of a group of one."""
    rows = np.flatnonzero(member >= 0)
    decoded = np.zeros(ends.size, bool)           # groups without one decoded payload have nothing to say
    decoded[member[rows[r.status[rows] == DECODED]]] = True
    rows = rows[(ends[member[rows]] >= 0) & decoded[member[rows]]]
    keys = ("idx", "op", "size", "group", "comm", "has_comm", "root", "peer", "redop")
    if not rows.size:
        return {**{k: np.empty(0, np.uint64 if k == "comm" else bool if k == "has_comm" else np.int64) for k in keys},
                "mixed": np.zeros(r.idx.size, bool)}
    rows = rows[np.argsort(member[rows], kind="stable")]
    gid = member[rows]
    first = np.r_[0, np.flatnonzero(np.diff(gid)) + 1]
    count = np.diff(np.r_[first, rows.size])
    op = r.op[rows]
    same_op = np.minimum.reduceat(op, first) == np.maximum.reduceat(op, first)
    p2p = np.logical_and.reduceat(np.isin(op, P2P), first)
    comm = r.comm[rows]
    has = r.has_comm[rows]
    same_comm = (np.minimum.reduceat(comm, first) == np.maximum.reduceat(comm, first)) & \
        (np.logical_and.reduceat(has, first) | ~np.logical_or.reduceat(has, first))
    sends = op == OPS.index("send")
    any_send = np.logical_or.reduceat(sends, first)
    counted = np.where(np.repeat(any_send, count), sends | ~np.isin(op, P2P), True)
    s = size[rows]
    total = np.add.reduceat(np.where(counted, np.maximum(s, 0), 0), first)
    unknown = np.logical_or.reduceat(counted & (s < 0), first)
    clear = same_comm & (same_op | p2p)
    one = count == 1
    out = {"idx": r.idx[ends[gid[first]]],
           "op": np.where(clear & same_op & (one | ~p2p), op[first], -1),
           "size": np.where(clear & ~unknown, total, -1),
           "group": np.where(same_comm, group[rows][first], -1),
           "comm": comm[first], "has_comm": has[first] & same_comm,
           **{k: np.where(one, r.f[k][rows][first], -1) for k in ("root", "peer")},
           "redop": np.where(np.minimum.reduceat(r.f["redop"][rows], first) ==
                             np.maximum.reduceat(r.f["redop"][rows], first), r.f["redop"][rows][first], -1)}
    mixed = np.zeros(r.idx.size, bool)
    mixed[ends[gid[first]][~clear]] = True
    out["mixed"] = mixed
    return out


def _notes(db: ExportDb, r: _Rows, schemas: dict, any_payload: bool) -> dict[int | None, list[tuple[str, str, int]]]:
    """Per process (None: no thread recorded, every process), the warnings about its NCCL ranges."""
    sized = any(lay is not None and lay.field("Message size [bytes]") for lay in schemas.values()) or \
        _schema_names_sized(db)
    proc = r.gtid >> 24
    out: dict[int | None, list[tuple[str, str, int]]] = {}
    has_payload = r.status != NONE
    for p in distinct(proc).tolist():
        mine = proc == p
        notes = []
        if not has_payload[mine].any() and (sized or any_payload):
            notes.append(("nsys-nccl-payload-unavailable", _unavailable(db), int(mine.sum())))
        for code, count, message in (
                ("nsys-nccl-payload-decoded", (r.status[mine] == DECODED).sum(),
                 "NCCL ranges whose NVTX payload was decoded (experimental: the blob header layout is not documented "
                 "by NVIDIA); collective sizes and communicators on nsys input come from them"),
                ("nsys-nccl-payload-undecodable", (r.status[mine] == UNDECODABLE).sum(),
                 "NCCL payloads that could not be decoded (truncated, or not the size their schema gives); those "
                 "calls have no size"),
                ("nsys-nccl-payload-unknown-schema", (r.status[mine] == UNKNOWN).sum(),
                 "NCCL payloads of a schema neither the export describes nor tracelens knows (a newer NCCL?); "
                 "those calls have no size"),
                ("nsys-nccl-group-size-unknown", r.unsized[mine].sum(),
                 "NCCL calls whose size is per rank (all-gather, reduce-scatter, all-to-all, gather, scatter) on a "
                 "communicator whose rank count the export does not hold (its init was not captured); no size"),
                ("nsys-nccl-group-mixed", r.mixed[mine].sum(),
                 "NCCL groups mixing operations or communicators: the kernels they launch get no size from them")):
            if count:
                notes.append((code, message, int(count)))
        if notes:
            out[p or None] = notes
    return out


def _schema_names_sized(db: ExportDb) -> bool:
    return db.has(PAYLOAD_ENTRIES) and "name" in db.columns(PAYLOAD_ENTRIES) and bool(
        db.rows(f"SELECT 1 FROM {PAYLOAD_ENTRIES} WHERE name IN ('Message size [bytes]', 'Bytes') LIMIT 1"))


def _unavailable(db: ExportDb) -> str:
    """Why sizes are missing, with the exact ``nsys export`` command that keeps them."""
    params = dict(db.pairs("META_DATA_EXPORT"))
    source = params.get("EXPORT_PARAM_INPUT_FILE") or "REPORT.nsys-rep"
    target = params.get("EXPORT_PARAM_OUTPUT_FILE") or "REPORT.sqlite"
    blobs, js = params.get("EXPORT_PARAM_INCLUDE_BLOBS"), params.get("EXPORT_PARAM_INCLUDE_JSON")
    if blobs == "true" or js == "true":
        why = ("the export was made with payloads, but NCCL's ranges carry none (NCCL older than 2.16.2, or "
               "NCCL_NVTX_DISABLE=1)")
    else:
        made = f" (EXPORT_PARAM_INCLUDE_BLOBS={blobs}, EXPORT_PARAM_INCLUDE_JSON={js})" if blobs or js else ""
        why = f"the export was made without them{made}"
    return (f"NCCL ranges carry their message size in NVTX payloads, but {why}; collective sizes are unknown. "
            f"Re-export with: nsys export --type sqlite --include-blobs true --force-overwrite true "
            f"--output {target} {source}")
