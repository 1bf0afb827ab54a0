"""NCCL payload benchmark: what decoding the NVTX payloads of N NCCL calls costs.

The export is generated (no public export carries blobs): N calls on 8 threads of one process, half of
them direct ncclAllReduce calls, half grouped ncclSend/ncclRecv pairs (ncclGroupStart ... ncclGroupEnd),
each with a payload built from NCCL 2.27's layouts (tests/fixtures/synth/nccl_payloads.py), the export's
schema rows, and one kernel. Timed in one warm process, alternately, several times (medians printed):

- fetch: reading the payload blobs out of SQLite (``_Db.blobs``, on a reader thread in a report);
- decode: the decoder on what was read (headers, fields, groups, descriptions, notes);
- baseline: sqlite3 merely fetching the same blobs row by row (``SELECT rowid, binaryData``);
- load: ``tracelens.load`` of the export, and of the same export with its payloads removed.

    python bench/bench_nvtx_payload.py [--calls N] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMM_ID = 0x5EED_0000_0000_0001
SIZE = 4 << 20


def build(path: Path, calls: int) -> dict:
    """The export with ``calls`` NCCL calls carrying payloads; returns what a decoder must find."""
    sys.path.insert(0, str(ROOT / "tests"))         # the payload builders are test fixtures
    from fixtures import synth
    from fixtures.synth import nccl_payloads as P

    con = sqlite3.connect(path)
    for table, cols in synth.NSYS_SCHEMA.items():
        con.execute(f"CREATE TABLE {table} ({cols})")
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_INCLUDE_BLOBS', 'true')")
    P.add_schema_tables(con, "2.27")
    blobs = {}
    for name, extra in (("ncclAllReduce", {"op": 0}), ("ncclSend", {"peer": 1}), ("ncclRecv", {"peer": 1})):
        sid, data = P.payload("2.27", name, comm=COMM_ID, size=SIZE, **extra)
        blobs[name] = P.blob(1, sid, data)
    sid, data = P.payload("2.27", "ncclCommInitRank", comm=COMM_ID, nranks=8)
    rows, t = [(0, 1, "ncclCommInitRank", (1 << 24) | 1, P.blob(1, sid, data))], 10
    direct = grouped = 0
    for i in range(calls):
        tid = (1 << 24) | (1 + (i // 4) % 8)       # blocks of 4 calls: 2 all-reduces, then one group
        if i % 4 < 2:
            rows.append((t, t + 5, "ncclAllReduce", tid, blobs["ncclAllReduce"]))
            direct += 1
        elif i % 4 == 2:
            rows += [(t, t + 1, "ncclGroupStart", tid, None), (t + 2, t + 3, "ncclSend", tid, blobs["ncclSend"])]
        else:
            rows += [(t, t + 1, "ncclRecv", tid, blobs["ncclRecv"]), (t + 2, t + 3, "ncclGroupEnd", tid, None)]
            grouped += 1
        t += 10
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId, binaryData) "
                    "VALUES (?, ?, 59, ?, ?, 1, ?)", rows)
    con.execute("INSERT INTO StringIds VALUES (1, 'gemm')")     # one kernel: an export that loads
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (0, {t}, 0, 1, 7, 1, {1 << 24}, "
                "1, 1, 1, 1, 1, 1, 1, 1)")
    con.commit()
    con.close()
    return {"payloads": calls + 1, "direct": direct, "groups": grouped}


def decode(path: Path):
    """(the NCCL ranges of the export, seconds to fetch the blobs, seconds to decode them)."""
    from tracelens.parsers.nsys import nccl_payloads as nsys_payload, sql as nsys_read

    db = nsys_read.ExportDb(path)
    try:
        q = nsys_read.start_queries(db)
        for f in q.values():
            if hasattr(f, "result"):
                f.result()                          # every read done: only the decoder is timed below
        t0 = time.perf_counter()
        db.blobs(nsys_read.NVTX_BLOBS)
        t1 = time.perf_counter()
        out = nsys_payload.nccl_ranges(db, q)
        return out, t1 - t0, time.perf_counter() - t1
    finally:
        db.close()


def fetch(path: Path) -> float:
    t0 = time.perf_counter()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.execute("SELECT rowid, binaryData FROM NVTX_EVENTS WHERE binaryData IS NOT NULL").fetchall()
    con.close()
    return time.perf_counter() - t0


def load(path: Path) -> float:
    import tracelens

    t0 = time.perf_counter()
    tracelens.load(str(path), cache=False)      # parsed every time
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        path, bare = Path(tmp) / "nccl_payloads.sqlite", Path(tmp) / "no_payloads.sqlite"
        truth = build(path, args.calls)
        bare.write_bytes(path.read_bytes())
        con = sqlite3.connect(bare)
        con.execute("UPDATE NVTX_EVENTS SET binaryData = NULL")
        con.commit()
        con.close()
        decode(path), load(path)                    # imports and page cache, not counted
        t = {k: [] for k in ("fetch", "decode", "baseline", "load", "load_bare")}
        for _ in range(args.runs):
            t["baseline"].append(fetch(path))
            _, f, d = decode(path)
            t["fetch"].append(f)
            t["decode"].append(d)
            t["load"].append(load(path))
            t["load_bare"].append(load(bare))
        ms = {k: round(statistics.median(v) * 1e3, 1) for k, v in t.items()}
        numbers = {"calls": args.calls, "payloads": truth["payloads"], "runs": args.runs,
                   **{f"{k}_ms": v for k, v in ms.items()},
                   "ratio_to_baseline": round((ms["fetch"] + ms["decode"]) / ms["baseline"], 2)}
        if args.json:
            print(json.dumps(numbers))
        else:
            print(f"{truth['payloads']:,} payloads ({path.stat().st_size / 1e6:.1f} MB export), medians of "
                  f"{args.runs}: fetch {ms['fetch']} ms + decode {ms['decode']} ms = "
                  f"{numbers['ratio_to_baseline']}x sqlite3's row-by-row fetch ({ms['baseline']} ms); "
                  f"tracelens.load {ms['load']} ms (without the payloads {ms['load_bare']} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
