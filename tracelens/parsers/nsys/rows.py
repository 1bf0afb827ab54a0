"""Nsight Systems exports, stage 2 of 4: the rows read by :mod:`.sql` -> per-process columns.

Kernels, copies, sets and syncs (device rows), runtime/driver calls and NVTX ranges (host rows) and thread
names become the parser contract's columns: string ids resolved to names once per distinct id, never per
row; copies, sets and syncs named as Kineto names them; torch's NVTX suffixes cut; the rows of every
process split by process (``globalPid >> 24``) once. Apart from the reading because it is columnar work
on what was read (numpy and Arrow; its only SQL is two small lookups through :class:`ExportDb`, StringIds and
ThreadNames): its cost and its naming rules can be checked on their own.
"""

from __future__ import annotations

import re
from concurrent.futures import Future

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...model.columns import categorical, distinct, unique_rows
from ...model.table import Labels
from ...model.meta import RunMeta
from .sql import NULL_TIME, ExportDb, arrow_strings, first_items, numpy_of

# Fallback copies of the CUDA enums (2.9.1 and older exports ship no ENUM_* tables); nsys-sqlite.md §7.
COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
             8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
            6: "Managed Static", 7: "Unknown"}
# Sync rows are named after the API call that produced them (syncType numbering changed across
# releases, gotcha 2), using Kineto's cuda_sync names so analyzers see one vocabulary.
SYNC_NAMES = {
    "cudaStreamSynchronize": "Stream Sync", "cuStreamSynchronize": "Stream Sync",
    "cudaDeviceSynchronize": "Context Sync", "cuCtxSynchronize": "Context Sync",
    "cudaEventSynchronize": "Event Sync", "cuEventSynchronize": "Event Sync",
    "cudaStreamWaitEvent": "Stream Wait Event", "cuStreamWaitEvent": "Stream Wait Event",
    "cudaEventQuery": "Event Query", "cuEventQuery": "Event Query",
    "cudaStreamQuery": "Stream Query", "cuStreamQuery": "Stream Query",
}
NO_ID = 0xFFFFFFFF                      # streamId/eventId "not applicable"
_API_SUFFIX = re.compile(r"_v\d+$")
# torch's NVTX ranges (emit_nvtx / --pytorch=autograd-nvtx) append ", seq = N, op_id = N, sizes = [...]";
# dropping it gives Kineto's name for the same op ("aten::mm, seq = 3, op_id = 77" -> "aten::mm").
_TORCH_SUFFIX_RE2 = r"(?s), (?:seq|op_id|sizes|input_op_ids) = .*$"
_TORCH_OP_ID = ", op_id = "


def string_ids(db: ExportDb, notes: list | None = None) -> dict[int, str]:
    """StringIds as a dict; ids that are not integers (no row can refer to them) are left out and counted
    in ``notes`` (``nsys-bad-string-ids``)."""
    if not db.has("StringIds") or not {"id", "value"} <= db.columns("StringIds"):
        return {}
    rows = db.rows("SELECT id, value FROM StringIds")
    out = {i: ("" if v is None else str(v)) for i, v in rows if type(i) is int}
    if len(out) < len(rows) and notes is not None:
        bad = sum(type(i) is not int for i, _ in rows)
        notes.append(("nsys-bad-string-ids", "StringIds rows whose id is not an integer were ignored; names "
                      "that refer to them read as <string N>", bad))
    return out


def _named(ids: np.ndarray, strings: dict[int, str], clean=None) -> Labels:
    """String-id codes -> categorical names, each distinct id looked up (and cleaned) once."""
    uniq, inv = np.unique(ids, return_inverse=True)
    names = [strings.get(int(i), f"<string {int(i)}>") for i in uniq]
    if clean is not None:
        names = [clean(n) for n in names]
    cats, remap = np.unique(np.array(names or [""], dtype=object), return_inverse=True)
    codes = remap[inv] if ids.size else np.empty(0, dtype=np.int64)
    return Labels(codes, cats)


def api_name(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``."""
    return _API_SUFFIX.sub("", name)


def _block(query: Future) -> np.ndarray:
    """A started all-integer query's columns as one (rows, columns) array."""
    return np.stack(query.result(), axis=1)


def device_rows(q: dict, strings: dict[int, str]) -> dict:
    """Kernels, copies, sets and syncs (columns), with the process key in ``proc``."""
    parts = []
    cols = ["start", "end", "device", "context", "stream", "correlation", "gpid"]

    k = _block(q["kernel"])
    frame = _columns(k[:, :7], cols)
    frame["kind"], frame["name"] = _const("compute", len(k)), _named(k[:, 7], strings)
    frame["bytes"], frame["cross_device"] = np.full(len(k), -1, np.int64), np.zeros(len(k), bool)
    # The launch configuration (grid, block) as an id; copies, sets and syncs have none (-1).
    frame["config"] = unique_rows(k[:, 8:14])[2] if len(k) else np.empty(0, np.int64)
    parts.append(frame)

    if "memcpy" in q:
        m = _block(q["memcpy"])
        frame = _columns(m[:, :7], cols)
        frame["kind"] = _const("memcpy", len(m))
        frame["name"] = categorical([f"Memcpy {COPY_KIND.get(c, 'Unknown')} ({MEM_KIND.get(s, 'Unknown')} -> "
                         f"{MEM_KIND.get(d, 'Unknown')})" for c, s, d in m[:, 8:11].tolist()])
        frame["bytes"], frame["config"] = m[:, 7], np.full(len(m), -1, np.int64)
        frame["cross_device"] = (m[:, 8] == 10) | ((m[:, 11] >= 0) & (m[:, 12] >= 0) & (m[:, 11] != m[:, 12]))
        parts.append(frame)
    if "memset" in q:
        s = _block(q["memset"])
        frame = _columns(s[:, :7], cols)
        frame["kind"] = _const("memset", len(s))
        frame["name"] = categorical([f"Memset ({MEM_KIND.get(k_, 'Unknown')})" for k_ in s[:, 8].tolist()])
        frame["bytes"], frame["cross_device"] = s[:, 7], np.zeros(len(s), bool)
        frame["config"] = np.full(len(s), -1, np.int64)
        parts.append(frame)
    if "sync" in q:
        runtime = _block(q["runtime"]) if "runtime" in q else None
        parts.append(_sync_rows(_block(q["sync"]), runtime, q["sync_match"], strings, cols))
    out = _stack(parts)
    out["proc"] = out.pop("gpid") >> 24
    return out


def drop_untimed(rows: dict, start: str, end: str) -> dict:
    """The rows with a start and an end (NULL in the export reads as NULL_TIME): the others cannot be placed
    and are left out. Their count per process is in ``untimed`` (proc -> rows)."""
    bad = (rows[start] == NULL_TIME) | (rows[end] == NULL_TIME)
    if not bad.any():
        rows["untimed"] = {}
        return rows
    procs, counts = np.unique(rows["proc"][bad], return_counts=True)
    keep = ~bad
    out = {c: v[keep] for c, v in rows.items()}
    out["untimed"] = dict(zip(procs.tolist(), counts.tolist()))
    return out


def on_epoch(start: np.ndarray, end: np.ndarray, base: int) -> np.ndarray:
    """Which rows fall outside [0, 2**63) ns once ``base`` (the capture's epoch offset) is added: checked
    before adding, so nothing wraps."""
    top = np.iinfo(np.int64).max - max(base, 0)
    return (start < -base) | (end < -base) | (start > top) | (end > top)


def _drop(rows: dict, bad: np.ndarray) -> dict:
    return {c: v[~bad] if hasattr(v, "__getitem__") and not isinstance(v, dict) else v for c, v in rows.items()}


def _columns(block: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    return {c: block[:, i] for i, c in enumerate(names)}


def _const(value: str, n: int) -> Labels:
    return Labels(np.zeros(n, dtype=np.int8), [value])


def _stack(parts: list[dict]) -> dict:
    """Concatenate column dicts; categoricals are merged through their codes (no per-row strings)."""
    out = {}
    for c in parts[0]:
        vals = [p[c] for p in parts]
        if isinstance(vals[0], Labels):
            out[c] = _union(vals) if len(vals) > 1 else vals[0]
        else:
            out[c] = np.concatenate([np.asarray(v) for v in vals])
    return out


def _union(cats: list[Labels]) -> Labels:
    """The categoricals one after the other, over the union of their categories (first seen first).

    What ``union_categoricals`` does, at a fraction of its cost for a few small category lists.
    """
    index: dict = {}
    codes = []
    for cat in cats:
        remap = np.array([index.setdefault(name, len(index)) for name in cat.categories.tolist()] + [-1],
                         dtype=np.int64)
        codes.append(remap[cat.codes])               # code -1 (missing) reads the appended -1
    return Labels(np.concatenate(codes), list(index))


def _sync_rows(rows: np.ndarray, runtime: np.ndarray | None, match: str | None, strings: dict[int, str],
               cols: list[str]) -> dict:
    """Sync records named after the runtime call behind each (same correlation id, and process if known).

    The match is made here on the runtime rows already read rather than by a join in SQLite, which builds
    a temporary index over the whole runtime table for every process's query."""
    frame = _columns(rows[:, :7], cols)
    frame["stream"] = np.where(frame["stream"] == NO_ID, -1, frame["stream"])
    frame["kind"] = _const("sync", len(rows))
    api = np.full(len(rows), -1, dtype=np.int64)
    if match is not None and runtime is not None and len(runtime) and len(rows):
        # Runtime columns: start, end, globalTid, correlationId, nameId, eventClass.
        r_proc, y_proc = (runtime[:, 2] >> 24, rows[:, 6] >> 24) if match == "process" else \
            (np.zeros(len(runtime), np.int64), np.zeros(len(rows), np.int64))
        procs, inv = np.unique(np.concatenate([r_proc, y_proc]), return_inverse=True)
        inv = inv.reshape(-1)
        r_key = (inv[:len(runtime)] << 32) | (runtime[:, 3] & 0xFFFFFFFF)
        y_key = (inv[len(runtime):] << 32) | (rows[:, 5] & 0xFFFFFFFF)
        order = np.argsort(r_key, kind="stable")
        at = np.searchsorted(r_key[order], y_key, side="right") - 1     # the last of equal keys, as the join did
        found = (at >= 0) & (rows[:, 5] >= 0)
        found[found] = r_key[order][at[found]] == y_key[found]
        api[found] = runtime[order[at[found]], 4]
    frame["name"] = categorical([SYNC_NAMES.get(api_name(strings.get(i, "")), "Unknown Sync") if i >= 0 else "Unknown Sync"
                     for i in api.tolist()])
    frame["bytes"], frame["cross_device"] = np.full(len(rows), -1, np.int64), np.zeros(len(rows), bool)
    frame["config"] = np.full(len(rows), -1, np.int64)
    return frame


def device_columns(rows: dict, base: int, meta: RunMeta) -> dict:
    """One process's device rows (columns) in the parser contract; contexts folded into the stream key when needed."""
    outside = on_epoch(rows["start"], rows["end"], base)
    if outside.any():
        meta.warnings.add("out-of-range-times", "skipped events whose start or end, in ns since the epoch, is "
                          "negative or does not fit int64", int(outside.sum()))
        rows = _drop(rows, outside)
    stream, device, context = rows["stream"], rows["device"], rows["context"]
    kind = rows["kind"]
    work = kind.codes != (list(kind.categories).index("sync") if "sync" in kind.categories else -2)
    # Distinct (device, context) pairs as one int64 key each (np.unique(axis=0) is slow even on a few rows).
    pairs = distinct((device[work] << 32) | (context[work] & 0xFFFFFFFF))
    devices, per_device = np.unique(pairs >> 32, return_counts=True)
    if (per_device > 1).any():
        # Stream ids are unique per context only: keep lanes apart by putting the context in the high bits.
        stream = np.where(stream >= 0, (context << 32) | stream, stream)
        meta.warnings.add("nsys-multiple-contexts", "a device had several CUDA contexts; stream ids carry the "
                          "context in their upper 32 bits", int((per_device > 1).sum()))
    meta.warnings.add("negative-duration", "events with a negative duration were clamped to 0",
                      int((rows["end"] < rows["start"]).sum()))
    start = rows["start"] + base
    return {"device": device, "stream": stream, "kind": kind, "name": rows["name"], "start_ns": start,
            "end_ns": np.maximum(rows["end"] + base, start), "correlation": rows["correlation"],
            "bytes": rows["bytes"], "cross_device": rows["cross_device"].astype(bool), "config": rows["config"]}


def host_rows(q: dict, strings: dict[int, str]) -> dict:
    """Runtime/driver API calls and NVTX ranges (columns), with the process key in ``proc``."""
    parts = []
    if "runtime" in q:
        a = _block(q["runtime"])
        names = _named(a[:, 4], strings, api_name)
        driver = (a[:, 5] == 1) | np.isin(names.codes, [i for i, n in enumerate(names.categories)
                                                        if re.match(r"cu[A-Z]", n)])
        parts.append({
            "gtid": a[:, 2], "cat": Labels(driver.astype(np.int8), ["cuda_runtime", "cuda_driver"]),
            "name": names, "start_ns": a[:, 0], "end_ns": np.maximum(a[:, 1], a[:, 0]), "correlation": a[:, 3],
            "nvtx_row": np.full(len(a), -1, np.int64)})
    if "nvtx" in q:
        cols = q["nvtx"].result()
        start, end, gtid, name = cols[0], cols[1], cols[2], cols[-1]
        if len(name):
            # Torch's ranges make nearly every text distinct (", op_id = N"). Cutting at the op id first is a
            # plain substring split; the few distinct heads left then take the full suffix regex (RE2). The
            # result is the regex's on every text: it cuts at the first suffix keyword, and what precedes
            # ", op_id = " holds any earlier one. All inside Arrow, no per-row Python.
            split = pc.split_pattern(name if isinstance(name, pa.Array) else arrow_strings(name),
                                     _TORCH_OP_ID, max_splits=1)
            heads = pc.dictionary_encode(first_items(split))
            cleaned = pc.replace_substring_regex(heads.dictionary, _TORCH_SUFFIX_RE2, "")
            names = pc.dictionary_encode(cleaned)
            head_codes = numpy_of(heads.indices)
            per_text = numpy_of(names.indices)[head_codes]
            stripped = numpy_of(pc.not_equal(pc.binary_length(heads.dictionary), pc.binary_length(cleaned)))
            torch_op = stripped[head_codes] | (numpy_of(pc.list_value_length(split)) > 1)
            names = names.dictionary.to_pylist()
            parts.append({
                "gtid": gtid,
                "cat": Labels(torch_op.astype(np.int8), ["user_annotation", "cpu_op"]),
                "name": Labels(per_text, names),
                "start_ns": start, "end_ns": end, "correlation": np.full(len(name), -1, np.int64),
                "nvtx_row": np.arange(len(name), dtype=np.int64)})     # the NCCL payloads' key
    none = np.empty(0, np.int64)
    cols = _stack(parts) if parts else {"gtid": none, "cat": Labels(none, []), "name": Labels(none, []),
                                        "start_ns": none, "end_ns": none, "correlation": none, "nvtx_row": none}
    gtid = cols.pop("gtid")
    return {"proc": gtid >> 24, "pid": (gtid >> 24) & 0xFFFFFF, "tid": gtid & 0xFFFFFF, **cols}


def host_columns(rows: dict, base: int, meta: RunMeta | None = None) -> dict:
    """One process's host rows (columns) in the parser contract, on the epoch clock, and each row's position
    in the NVTX query (``nvtx_row``, -1 for runtime calls) for the NCCL payloads."""
    outside = on_epoch(rows["start_ns"], rows["end_ns"], base)
    if outside.any():
        if meta is not None:
            meta.warnings.add("out-of-range-times", "skipped events whose start or end, in ns since the epoch, "
                              "is negative or does not fit int64", int(outside.sum()))
        rows = _drop(rows, outside)
    n = len(rows["start_ns"])
    return {"pid": rows["pid"], "tid": rows["tid"], "cat": rows["cat"], "name": rows["name"],
            "start_ns": rows["start_ns"] + base, "end_ns": rows["end_ns"] + base,
            "correlation": rows["correlation"], "external_id": np.full(n, -1, np.int64),
            "nvtx_row": rows["nvtx_row"]}


def thread_rows(db: ExportDb, strings: dict[int, str]) -> dict[str, np.ndarray]:
    """Thread names as columns (proc, pid, tid, name), the last name recorded for a thread winning."""
    if not db.has("ThreadNames") or not {"globalTid", "nameId"} <= db.columns("ThreadNames"):
        none = np.empty(0, np.int64)
        return {"proc": none, "pid": none, "tid": none, "name": np.empty(0, object)}
    rows = db.ints('SELECT coalesce("globalTid", 0), coalesce("nameId", -1) FROM ThreadNames', 2)
    gtid = rows[:, 0]
    key = ((gtid >> 24) & 0xFFFFFF) << 32 | (gtid & 0xFFFFFF)
    _, last = np.unique(key[::-1], return_index=True)        # the last row of each (pid, tid)
    keep = np.sort(len(key) - 1 - last)
    gtid = gtid[keep]
    return {"proc": gtid >> 24, "pid": (gtid >> 24) & 0xFFFFFF, "tid": gtid & 0xFFFFFF,
            "name": np.array([strings.get(i, "") for i in rows[keep, 1].tolist()] + [None], dtype=object)[:-1]}


def by_process(columns: dict):
    """``proc -> that process's rows``: the columns reordered by process once (stable), then sliced per
    process, instead of a boolean mask over every column for every process."""
    cache: dict = {}

    def rows(proc: int) -> dict:
        if not cache:
            order = np.argsort(columns["proc"], kind="stable")
            cache.update({c: v[order] for c, v in columns.items()})
        procs = cache["proc"]
        a, b = np.searchsorted(procs, proc, side="left"), np.searchsorted(procs, proc, side="right")
        return {c: v[a:b] for c, v in cache.items()}

    return rows
