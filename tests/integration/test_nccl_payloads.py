"""NCCL's NVTX payloads on nsys input: every schema of three NCCL eras, bad blobs, groups, JSON text, and
collective sizes end to end through ``tracelens report``.

No public export carries blobs, so the payloads are built from the reference's struct layouts
(``tests/fixtures/synth/nccl_payloads.py``); the corpus exports' schema rows are checked against them.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import struct

import numpy as np
import pytest

from tracelens.cli import main
from tracelens.parsers.nsys import nccl_payloads as nsys_payload, sql as nsys_read
from tracelens.parsers.nsys.nccl_layouts import CALLS, REF_LAYOUTS

from conftest import ROOT, corpus_file
from fixtures import synth
from fixtures.synth import nccl_payloads as P

COMM_ID = 0xF3A2_0000_1234_ABCD          # above 2**63: the id must keep all 64 bits
GTID = (1 << 48) | (4242 << 24) | 4242   # one process, its main thread
MIB = 1 << 20


def export(tmp_path, era: str | None, ranges, json_text: bool = False, schemas=None, name="x.sqlite"):
    """A minimal export: the synthetic writer's tables, the schema tables of ``era`` (None: none), and one
    NVTX range in domain 1 per ``(name, payload bytes or JSON dict or None[, thread])``, 10 µs apart."""
    path = tmp_path / name
    con = sqlite3.connect(path)
    for table, cols in synth.NSYS_SCHEMA.items():
        con.execute(f"CREATE TABLE {table} ({cols})")
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_INCLUDE_BLOBS', 'false')")
    if era is not None or schemas is not None:
        P.add_schema_tables(con, era, schemas=schemas)
    else:
        con.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN binaryData TEXT")
    for i, (rng, data, *thread) in enumerate(ranges):
        blob, text = (None, json.dumps(data)) if isinstance(data, dict) else (data, None)
        con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId, binaryData, jsonText) "
                    "VALUES (?, ?, 59, ?, ?, 1, ?, ?)", (i * 10_000, i * 10_000 + 5_000, rng,
                                                         thread[0] if thread else GTID, blob, text))
    con.commit()
    con.close()
    return path


def decode(path):
    """{range index: its description} and {code: count} of the NCCL ranges of an export."""
    db = nsys_read.ExportDb(path)
    try:
        q = nsys_read.start_queries(db)
        out = nsys_payload.nccl_ranges(db, q)
    finally:
        db.close()
    rows = {int(r): {c: v[i] for c, v in out.columns.items()} for i, r in enumerate(out.rows.tolist())}
    notes = {code: n for per in out.notes.values() for code, _, n in per}
    return rows, notes


def call(era, rng, **values):
    sid, data = P.payload(era, rng, **values)
    return rng, P.blob(1, sid, data)


@pytest.mark.parametrize("era", ["2.25", "2.27"])
def test_every_schema_with_a_communicator_id(era, tmp_path):
    # Each call's fields packed from the reference layout (§2); expected values are the packed ones, sizes
    # per nccl-tests' S: the per-rank count of all-gather and reduce-scatter times the 8 ranks of the
    # communicator's init payload (§2 "Meaning").
    ranges = [call(era, "ncclCommInitRank", comm=COMM_ID, nranks=8, rank=3, dev=3),
              call(era, "ncclAllReduce", comm=COMM_ID, size=4 * MIB, op=4),
              call(era, "ncclAllGather", comm=COMM_ID, size=MIB),
              call(era, "ncclReduceScatter", comm=COMM_ID, size=MIB, op=2),
              call(era, "ncclBroadcast", comm=COMM_ID, size=3000, root=5),
              call(era, "ncclReduce", comm=COMM_ID, size=96, root=7, op=3),
              call(era, "ncclSend", comm=COMM_ID, size=512, peer=2),
              call(era, "ncclRecv", comm=COMM_ID, size=256, peer=6),
              call(era, "ncclCommFinalize", comm=COMM_ID)]
    rows, notes = decode(export(tmp_path, era, ranges))
    pg = f"0x{COMM_ID:x}"
    got = {i: (d["collective"], int(d["bytes"]), int(d["group_size"]), d["pg_name"], int(d["root"]), int(d["peer"]),
               d["redop"]) for i, d in rows.items()}
    assert got == {1: ("all_reduce", 4 * MIB, 8, pg, -1, -1, "avg"),
                   2: ("all_gather", 8 * MIB, 8, pg, -1, -1, None),
                   3: ("reduce_scatter", 8 * MIB, 8, pg, -1, -1, "max"),
                   4: ("broadcast", 3000, 8, pg, 5, -1, None),
                   5: ("reduce", 96, 8, pg, 7, -1, "min"),
                   6: ("send", 512, 8, pg, -1, 2, None),
                   7: ("recv", 256, 8, pg, -1, 6, None)}
    assert notes == {"nsys-nccl-payload-decoded": 9}          # the 9 ranges above, init and finalize included


def test_every_schema_before_communicator_ids(tmp_path):
    # 2.16.2-2.24: no communicator id, "Bytes" names for broadcast/send/recv, the enum at START+11. Without a
    # communicator there is no rank count: the two per-rank sizes stay unknown, and say so.
    era = "2.18"
    ranges = [call(era, "ncclCommInitRank", nranks=8, rank=1, dev=1),
              call(era, "ncclAllReduce", size=4 * MIB, op=0),
              call(era, "ncclAllGather", size=MIB),
              call(era, "ncclReduceScatter", size=MIB, op=1),
              call(era, "ncclBroadcast", size=3000, root=5),
              call(era, "ncclReduce", size=96, root=7, op=3),
              call(era, "ncclSend", size=512, peer=2),
              call(era, "ncclRecv", size=256, peer=6)]
    rows, notes = decode(export(tmp_path, era, ranges))
    got = {i: (d["collective"], int(d["bytes"]), d["pg_name"], int(d["root"]), int(d["peer"]), d["redop"])
           for i, d in rows.items()}
    assert got == {1: ("all_reduce", 4 * MIB, None, -1, -1, "sum"), 2: ("all_gather", -1, None, -1, -1, None),
                   3: ("reduce_scatter", -1, None, -1, -1, "prod"), 4: ("broadcast", 3000, None, 5, -1, None),
                   5: ("reduce", 96, None, 7, -1, "min"), 6: ("send", 512, None, -1, 2, None),
                   7: ("recv", 256, None, -1, 6, None)}
    assert notes == {"nsys-nccl-payload-decoded": 8, "nsys-nccl-group-size-unknown": 2}


@pytest.mark.parametrize("era", ["2.18", "2.27"])
def test_reference_layouts_when_the_export_has_no_schema_rows(era, tmp_path):
    # nsys before 2026.2 exports no schema tables: the layout comes from the reference by call and payload size.
    comm = {"comm": COMM_ID} if era != "2.18" else {}
    ranges = [call(era, "ncclAllReduce", size=4 * MIB, op=2, **comm), call(era, "ncclSend", size=64, peer=1, **comm)]
    rows, notes = decode(export(tmp_path, None, ranges))
    assert [(d["collective"], int(d["bytes"]), d["redop"], int(d["peer"])) for d in rows.values()] == \
        [("all_reduce", 4 * MIB, "max", -1), ("send", 64, None, 1)]
    assert notes == {"nsys-nccl-payload-decoded": 2}


def test_enum_id_that_is_also_a_struct_schema_id(tmp_path):
    # 2.25: "Reduction operation" has type START+14, which is also CommFinalize's 8-byte struct schema. The
    # enum is 4 bytes whatever that id names: reading 8 would take the padding into the op.
    era = "2.25"
    assert P.SCHEMA_SETS[era][P.START + 5][2][2][1] == P.START + 14 and P.START + 14 in P.SCHEMA_SETS[era]
    sid, data = P.payload(era, "ncclAllReduce", comm=COMM_ID, size=MIB, op=1)
    data = data[:20] + b"\xff\xff\xff\xff"             # junk in the struct's tail padding
    rows, _ = decode(export(tmp_path, era, [("ncclAllReduce", P.blob(1, sid, data))]))
    assert (rows[0]["redop"], int(rows[0]["bytes"])) == ("prod", MIB)


def test_field_sizes_come_from_the_entry_types(tmp_path):
    # A schema whose message size is a 4-byte unsigned (type 16) at offset 8 and whose peer is at 12: the
    # decoder must follow the exported types and offsets, not the usual 8-byte size_t layout.
    schemas = {P.START + 9: (("ncclSend",), 16, [(P.COMM, P.U64, 0), (P.SIZE, P.U32, 8), (P.PEER, P.INT, 12)])}
    data = struct.pack("<QIi", COMM_ID, 70000, 3)
    rows, notes = decode(export(tmp_path, None, [("ncclSend", P.blob(1, P.START + 9, data))], schemas=schemas))
    assert (int(rows[0]["bytes"]), int(rows[0]["peer"])) == (70000, 3)
    assert notes == {"nsys-nccl-payload-decoded": 1}


def test_bad_blobs_are_counted_not_fatal(tmp_path):
    era = "2.27"
    sid, good = P.payload(era, "ncclAllReduce", comm=COMM_ID, size=MIB, op=0)
    ranges = [("ncclAllReduce", P.blob(1, sid, good)[:40]),           # truncated: header says 24, 8 there
              ("ncclAllReduce", P.blob(1, sid, good)[:20]),           # shorter than the header
              ("ncclAllReduce", P.blob(1, sid, good[:16])),           # header size 16 != the schema's 24
              ("ncclAllReduce", P.blob(1, P.START + 99, good)),       # no such schema; 24 B is a known size...
              ("ncclFancyNewCall", P.blob(1, P.START + 98, good)),    # ...but not for an unknown call
              ("ncclAllReduce", P.blob(1, sid, good))]                # and one good one
    rows, notes = decode(export(tmp_path, era, ranges))
    assert {i: int(d["bytes"]) for i, d in rows.items()} == {3: MIB, 5: MIB}
    assert notes == {"nsys-nccl-payload-undecodable": 3, "nsys-nccl-payload-unknown-schema": 1,
                     "nsys-nccl-payload-decoded": 2}


def test_json_text_payloads(tmp_path):
    # --include-json: entry names as keys; op names or numbers, communicator ids as numbers or hex text.
    ranges = [("ncclCommInitRank", {P.COMM: COMM_ID, P.NRANKS: 4, P.RANK: 0, P.DEV: 0}),
              ("ncclAllGather", {P.COMM: f"0x{COMM_ID:x}", P.SIZE: 1000}),
              ("ncclAllReduce", {"payload": {P.COMM: COMM_ID, P.SIZE: 4000, P.OP: "ncclMax"}}),
              ("ncclAllReduce", {"something": "else"})]
    rows, notes = decode(export(tmp_path, None, ranges))
    assert {i: (d["collective"], int(d["bytes"]), int(d["group_size"]), d["redop"]) for i, d in rows.items()} == \
        {1: ("all_gather", 4000, 4, None), 2: ("all_reduce", 4000, 4, "max")}     # 1000 B per rank x 4 ranks
    assert notes == {"nsys-nccl-payload-decoded": 3, "nsys-nccl-payload-undecodable": 1}


def test_json_text_through_the_string_table(tmp_path):
    # nsys can store the JSON text as a StringIds entry (NVTX_EVENTS.jsonTextId) instead of inline.
    path = export(tmp_path, None, [("ncclSend", None)])
    con = sqlite3.connect(path)
    con.execute("INSERT INTO StringIds VALUES (77, ?)", (json.dumps({P.SIZE: 123, P.PEER: 4}),))
    con.execute("UPDATE NVTX_EVENTS SET jsonTextId = 77")
    con.commit()
    con.close()
    rows, notes = decode(path)
    assert [(d["collective"], int(d["bytes"]), int(d["peer"])) for d in rows.values()] == [("send", 123, 4)]
    assert notes == {"nsys-nccl-payload-decoded": 1}


def test_groups_describe_their_group_end(tmp_path):
    era = "2.27"
    other = GTID + 1                                         # a second thread of the same process
    ranges = [("ncclGroupEnd", None),                        # 0: closes a group opened before the capture
              call(era, "ncclCommInitRank", comm=COMM_ID, nranks=2),
              ("ncclGroupStart", None),                      # 2: all-to-all as sends and receives
              call(era, "ncclSend", comm=COMM_ID, size=MIB, peer=0),
              call(era, "ncclRecv", comm=COMM_ID, size=MIB, peer=0),
              ("ncclGroupStart", None, other),               # 5: another thread's group does not mix in
              call(era, "ncclSend", comm=COMM_ID, size=3 * MIB, peer=1),
              call(era, "ncclRecv", comm=COMM_ID, size=MIB, peer=1),
              ("ncclGroupEnd", None),                        # 8: closes 2 -> sends 1 + 3 MiB
              ("ncclGroupStart", None),                      # 9: coalesced all-gathers, nested groups
              call(era, "ncclAllGather", comm=COMM_ID, size=MIB), ("ncclGroupStart", None),
              call(era, "ncclAllGather", comm=COMM_ID, size=2 * MIB), ("ncclGroupEnd", None),
              ("ncclGroupEnd", None),                        # 14: 2 x (1 + 2) MiB
              ("ncclGroupStart", None), call(era, "ncclAllReduce", comm=COMM_ID, size=MIB, op=0),
              call(era, "ncclAllGather", comm=COMM_ID, size=MIB), ("ncclGroupEnd", None),   # 18: mixed
              ("ncclGroupStart", None), call(era, "ncclRecv", comm=COMM_ID, size=5, peer=1),
              ("ncclGroupEnd", None),                        # 21: a group of one keeps its op and peer
              ("ncclGroupEnd", None, other)]                 # 22: other thread, closes 5 (nothing inside)
    rows, notes = decode(export(tmp_path, era, ranges))
    ends = {i: (d["collective"], int(d["bytes"]), int(d["peer"])) for i, d in rows.items()
            if ranges[i][0] == "ncclGroupEnd"}
    assert ends == {8: (None, 4 * MIB, -1), 14: ("all_gather", 6 * MIB, -1), 18: (None, -1, -1), 21: ("recv", 5, 1)}
    assert notes["nsys-nccl-group-mixed"] == 1


def nsys_with_payloads(tmp_path, sc, era="2.27"):
    """The scenario's nsys exports with a payload on every ncclAllReduce range (the bucket's size) and an
    init payload giving the communicator's rank count."""
    paths = synth.write_nsys(sc, tmp_path / "nsys")
    for path in paths:
        con = sqlite3.connect(path)
        P.add_schema_tables(con, era)
        sid, data = P.payload(era, "ncclAllReduce", comm=COMM_ID, size=sc.bucket_bytes, op=0)
        con.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE text = 'ncclAllReduce'", (P.blob(1, sid, data),))
        sid, data = P.payload(era, "ncclCommInitRank", comm=COMM_ID, nranks=sc.ranks)
        con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId, binaryData) "
                    "SELECT 1, 2, 59, 'ncclCommInitRank', globalTid, 1, ? FROM NVTX_EVENTS WHERE text = "
                    "'ncclAllReduce' LIMIT 1", (P.blob(1, sid, data),))
        con.commit()
        con.close()
    return paths


def report_json(paths, capsys) -> dict:
    assert main(["report", *map(str, paths), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_sizes_end_to_end_match_kineto(tmp_path, capsys):
    sc = synth.SCENARIOS["straggler"]
    synth.write(sc, tmp_path / "kineto")
    kin = report_json([tmp_path / "kineto"], capsys)
    ns = report_json(nsys_with_payloads(tmp_path, sc), capsys)
    # The Kineto writer's record_param_comms: bucket_bytes / 4 float elements (tests/fixtures/synth/kineto.py).
    assert {c["bytes"] for c in kin["collectives"]} == {sc.bucket_bytes}
    assert [(c["rank"], c["op"], c["bytes"]) for c in ns["collectives"]] == \
        [(c["rank"], c["op"], c["bytes"]) for c in kin["collectives"]]
    decoded = {w["rank"]: w["count"] for w in ns["warnings"] if w["code"] == "nsys-nccl-payload-decoded"}
    per_rank = {r["rank"]: sum(c["rank"] == r["rank"] for c in ns["collectives"]) + 1 for r in ns["ranks"]}
    assert decoded == per_rank              # every all-reduce range and the one init range of each rank


def test_export_without_payloads_says_how_to_get_them(tmp_path, capsys):
    sc = synth.SCENARIOS["straggler"]
    paths = nsys_with_payloads(tmp_path, sc)
    for path in paths:
        con = sqlite3.connect(path)
        con.execute("UPDATE NVTX_EVENTS SET binaryData = NULL")
        con.execute("UPDATE META_DATA_EXPORT SET value = 'false' WHERE name = 'EXPORT_PARAM_INCLUDE_BLOBS'")
        con.commit()
        con.close()
    rep = report_json(paths, capsys)
    assert {c["bytes"] for c in rep["collectives"]} == {None}
    (msg,) = {w["message"] for w in rep["warnings"] if w["code"] == "nsys-nccl-payload-unavailable"}
    assert "nsys export --type sqlite --include-blobs true" in msg and "EXPORT_PARAM_INCLUDE_BLOBS=false" in msg


def test_grouped_sends_on_the_corpus_export(tmp_path, capsys):
    # mfu_2gpu_before (NCCL 2.27 schema rows, no blobs): each SendRecv kernel is launched inside an
    # ncclGroupEnd after two ncclSend and two ncclRecv ranges (by hand, sqlite3: 132 sends, 66 groups). With
    # a 1 MiB payload written on every send and receive, each group moves 2 MiB of sends.
    src = corpus_file("nsys/nsys-ai/mfu_2gpu_before.sqlite")
    copy = tmp_path / "mfu_with_blobs.sqlite"
    copy.write_bytes(src.read_bytes())
    con = sqlite3.connect(copy)
    for rng in ("ncclSend", "ncclRecv"):
        sid, data = P.payload("2.27", rng, comm=COMM_ID, size=MIB, peer=1)
        assert sid == (16777225 if rng == "ncclSend" else 16777226)         # the file's own schema ids
        con.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE domainId = 1 AND textId IN "
                    "(SELECT id FROM StringIds WHERE value = ?) OR text = ?", (P.blob(1, sid, data), rng, rng))
    con.commit()
    con.close()
    rep = report_json([copy], capsys)
    # 33 SendRecv kernels per rank; 32 launched in a captured group (test_nsys: the window cut one launch).
    sized = [c for c in rep["collectives"] if c["bytes"] is not None]
    assert [sum(c["rank"] == r for c in sized) for r in (0, 1)] == [32, 32]
    assert {(c["op"], c["bytes"]) for c in sized} == {("all_to_all", 2 * MIB)}   # op from torch's nccl:all_to_all
    decoded = {w["rank"]: w["count"] for w in rep["warnings"] if w["code"] == "nsys-nccl-payload-decoded"}
    assert sum(decoded.values()) == 264                     # 132 sends + 132 receives


# The corpus exports' schema rows against the reference layouts (2.27: enum at START+16).
@pytest.mark.parametrize("rel", ["nsys/nsys-ai/mfu_2gpu_before.sqlite", "nsys/nsys-ai/h100_2gpu_1s.sqlite"])
def test_corpus_schema_rows_match_the_reference(rel):
    con = sqlite3.connect(f"file:{corpus_file(rel)}?mode=ro", uri=True)
    rows = con.execute("SELECT DISTINCT schemaId, idx, type, name, offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES").fetchall()
    sizes = dict(con.execute("SELECT DISTINCT schemaId, payloadSize FROM NVTX_PAYLOAD_SCHEMAS").fetchall())
    con.close()
    found: dict[int, list] = {}
    for sid, idx, type_code, name, offset in sorted(rows):
        found.setdefault(sid, []).append((name, type_code, 0 if offset is None else offset))
    ref = P.SCHEMA_SETS["2.27"]
    assert found and set(found) <= set(ref)
    for sid, entries in found.items():
        assert (sizes[sid], entries) == (ref[sid][1], ref[sid][2]), ref[sid][0]
    # mfu_2gpu_before: 8 schemas (INVENTORY: 16 rows, one set per process); h100_2gpu_1s: 6 (12 rows).
    assert len(found) == (8 if "mfu" in rel else 6)
    # And the decoder reads each of them as the layout it falls back to for that call and payload size.
    db = nsys_read.ExportDb(corpus_file(rel))
    try:
        layouts = nsys_payload._schemas(db)
    finally:
        db.close()
    for sid in found:
        call = ref[sid][0][0][4:].lower()
        family = CALLS[call][1] if call in CALLS else "comm"
        assert layouts[(1, sid)] == REF_LAYOUTS[(family, sizes[sid])], ref[sid][0]


def test_decoding_keeps_every_bit_of_the_communicator_id(tmp_path):
    rows, _ = decode(export(tmp_path, "2.27", [call("2.27", "ncclAllReduce", comm=2**64 - 1, size=1, op=0)]))
    assert rows[0]["pg_name"] == "0xffffffffffffffff" and np.int64(rows[0]["bytes"]) == 1


def test_a_range_that_launched_two_kernels_gives_neither_its_size(tmp_path, capsys):
    sc = synth.SCENARIOS["straggler"]
    paths = nsys_with_payloads(tmp_path, sc)
    con = sqlite3.connect(paths[0])
    # The first comm kernel's launch, and a second launch 1.5 µs after it, still inside its ncclAllReduce
    # range (launch - 2 µs .. launch + 3 µs, tests/fixtures/synth/nsys.py), of a copy of that kernel placed
    # after every other kernel.
    corr, launch = con.execute(
        "SELECT k.correlationId, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = k.correlationId JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'nccl%' "
        "ORDER BY r.start LIMIT 1").fetchone()
    new, last = con.execute("SELECT max(correlationId) + 1, max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT start + 1500, start + 2000, eventClass, globalTid, ?, "
                "nameId, returnValue, callchainId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = ?",
                (new, corr))
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT ? + 1000, ? + 2000, deviceId, contextId, streamId, ?, "
                "globalPid, demangledName, shortName, gridX, gridY, gridZ, blockX, blockY, blockZ "
                "FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId = ?", (last, last, new, corr))
    con.commit()
    con.close()
    rep = report_json(paths, capsys)
    first = min(c["start_ns"] for c in rep["collectives"] if c["rank"] == 0)
    last_rank0 = max(c["start_ns"] for c in rep["collectives"] if c["rank"] == 0)
    unsized = sorted(c["start_ns"] for c in rep["collectives"] if c["bytes"] is None)
    assert unsized == [first, last_rank0]           # the original kernel and its copy, both on rank 0
    assert {c["bytes"] for c in rep["collectives"] if c["bytes"] is not None} == {sc.bucket_bytes}
    assert [(w["rank"], w["count"]) for w in rep["warnings"] if w["code"] == "nsys-nccl-range-several-kernels"] == \
        [(0, 2)]


def test_the_benchmark_export_decodes_completely(tmp_path):
    # bench/bench_nvtx_payload.py times the decoder on its own generated export: this checks that what it
    # times is a complete decode (its build() returns the generator's counts).
    spec = importlib.util.spec_from_file_location("bench_nvtx_payload", ROOT / "bench" / "bench_nvtx_payload.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    truth = bench.build(tmp_path / "bench.sqlite", 400)
    out, fetch_s, decode_s = bench.decode(tmp_path / "bench.sqlite")
    notes = {code: n for per in out.notes.values() for code, _, n in per}
    assert notes == {"nsys-nccl-payload-decoded": truth["payloads"]}
    described = list(zip(out.columns["collective"].tolist(), out.columns["bytes"].tolist()))
    assert described.count(("all_reduce", bench.SIZE)) == truth["direct"]
    assert described.count((None, bench.SIZE)) == truth["groups"]             # each group: one 4 MiB send
    assert len(described) == truth["direct"] + truth["groups"]     # grouped calls: only their group's end
    assert fetch_s > 0 and decode_s > 0
