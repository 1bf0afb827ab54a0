"""Hostile input (issue 17): each input that once gave a traceback, a wrong number or a changed input file.

Kineto cases take the synthetic ``one_bucket`` rank 0 (generator truth) and change one thing; the
expected report is either the generator's arithmetic truth or the report of the same file with the bad
event removed (the peer). nsys cases do the same on its SQLite export.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import sqlite3
import zlib
from pathlib import Path

import pytest

import tracelens
from tracelens.cli import main

from conftest import write_trace
from fixtures import synth

SC = synth.SCENARIOS["one_bucket"]


def run(capsys, *args):
    code = main(["report", "--format", "json", *map(str, args)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def doc() -> dict:
    return copy.deepcopy(synth.trace_dict(SC, 0))


def write(path: Path, d: dict) -> Path:
    path.write_text(json.dumps(d))
    return path


def report_of(path: Path):
    return tracelens.analyze(tracelens.load(str(path)))


def steps(rep) -> list[tuple]:
    return [(s.step, s.start_ns, s.end_ns, s.comm_ns, s.exposed_comm_ns, s.compute_ns, s.idle_ns)
            for r in rep.ranks for s in r.steps]


def codes(rep) -> dict[str, int]:
    return {w.code: w.count for w in rep.warnings}


def first_kernel(d: dict, comm: bool = False) -> int:
    return next(i for i, e in enumerate(d["traceEvents"]) if e.get("cat") == "kernel"
                and ("nccl" in e["name"].lower()) == comm)


def without(d: dict, i: int) -> dict:
    d = copy.deepcopy(d)
    del d["traceEvents"][i]
    return d


# --------------------------------------------------------------------------------------------- Kineto


def test_non_utf8_byte_in_a_name_is_replaced_and_counted(tmp_path, capsys):
    d = doc()
    i = first_kernel(d)
    d["traceEvents"][i]["name"] = "gemm_MARK"
    path = tmp_path / "bad.json"
    path.write_bytes(json.dumps(d).encode().replace(b"MARK", b"\xff\xfe"))
    code, out, _ = run(capsys, path)
    rep = json.loads(out)
    assert code == 0
    # The two invalid bytes are one invalid sequence each: two replacements, counted once as a warning.
    assert {w["code"]: w["count"] for w in rep["warnings"]}["invalid-utf8"] == 2
    # Only a name changed: the numbers are the clean file's (the generator's truth).
    assert steps(report_of(path)) == steps(report_of(write(tmp_path / "clean.json", doc())))


def test_non_utf8_byte_after_a_value_of_the_wrong_type_is_replaced_too(tmp_path, capsys):
    """The typed decode stops first at the value of the wrong type, the per-event decode then at the bad bytes
    (msgspec 0.23 says so with a DecodeError, the class it gives text that is not JSON: issue 44)."""
    d = doc()
    i = first_kernel(d)
    d["traceEvents"][i]["name"] = "gemm_MARK"
    at = next(k for k, e in enumerate(d["traceEvents"]) if k < i and e.get("ph") == "X")
    d["traceEvents"][at]["ts"] = str(d["traceEvents"][at]["ts"])       # a number written as text: repaired
    path = tmp_path / "bad.json"
    path.write_bytes(json.dumps(d).encode().replace(b"MARK", b"\xff"))
    code, out, _ = run(capsys, path)
    rep = json.loads(out)
    counts = {w["code"]: w["count"] for w in rep["warnings"]}
    assert code == 0 and counts["invalid-utf8"] == 1 and counts["coerced-values"] == 1
    assert steps(report_of(path)) == steps(report_of(write(tmp_path / "clean.json", doc())))


def test_non_utf8_bytes_in_text_that_is_not_json_is_not_json(tmp_path, capsys):
    """Replacing the bad bytes does not make broken JSON readable: the answer is still "not valid JSON"."""
    text = json.dumps(doc()).encode()
    path = tmp_path / "bad.json"
    path.write_bytes(text[: len(text) // 2].replace(b"gemm", b"g\xffmm", 1))
    code, _, err = run(capsys, path)
    assert code == 3 and err.count("\n") == 1 and "bad.json: not valid JSON" in err


def test_nesting_past_the_decoder_limit_is_one_line_exit_3(tmp_path, capsys):
    d = doc()
    d["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1, "args": {"z": "DEEP"}})
    deep = b'{"a":' * 1000 + b"1" + b"}" * 1000        # 1,000 levels, as in the issue
    path = tmp_path / "deep.json"
    path.write_bytes(json.dumps(d).encode().replace(b'"DEEP"', deep))
    code, _, err = run(capsys, path)
    assert code == 3 and err.count("\n") == 1 and "deep.json" in err and "nested deeper" in err


@pytest.mark.parametrize("field, value", [("args.bytes", 2**70), ("ts", 2**70), ("dur", -(2**70)),
                                          ("ph", ["X"]), ("ph", {"X": 1}), ("ts", None), ("dur", None),
                                          ("ts", "missing"), ("dur", "missing")])
def test_one_bad_value_costs_only_its_event(tmp_path, capsys, field, value):
    d = doc()
    i = first_kernel(d, comm=True)
    head, _, rest = field.partition(".")
    target = d["traceEvents"][i][head] if rest else d["traceEvents"][i]
    if value == "missing":
        del target[rest or head]
    else:
        target[rest or head] = value
    code, out, _ = run(capsys, write(tmp_path / "bad.json", d))
    assert code == 0
    warned = {w["code"]: w for w in json.loads(out)["warnings"]}
    assert warned["malformed-events"]["count"] == 1 and field.split(".")[-1] in warned["malformed-events"]["message"]
    # The event is skipped, never read as 0 (at the epoch, or of zero length): the peer without it.
    assert steps(report_of(tmp_path / "bad.json")) == steps(report_of(write(tmp_path / "peer.json", without(doc(), i))))


def test_zero_length_kernel_beside_a_device_sync(tmp_path, capsys):
    # The only kernel has no length, so the device is never busy: the sync analyzer once indexed an empty set.
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000, "dur": 500},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1, "ts": 1200,
           "dur": 100, "args": {}},
          {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1250, "dur": 0,
           "args": {"device": 0, "stream": 7}}]
    code, out, _ = run(capsys, write_trace(tmp_path / "r.json", ev))
    step = json.loads(out)["ranks"][0]["steps"][0]
    # ProfilerStep#1: 1000 µs to 1500 µs; nothing ran on the device.
    assert code == 0 and (step["start_ns"], step["end_ns"], step["compute_ns"]) == (1_000_000, 1_500_000, 0)


def _bomb(path: Path, inflated: int) -> Path:
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [co.compress(b'{"traceEvents": [')]
    parts += [co.compress(b" " * (1 << 20)) for _ in range(inflated >> 20)]
    path.write_bytes(b"".join(parts + [co.compress(b"]}"), co.flush()]))
    return path


def test_gzip_bomb_stops_at_the_cap(tmp_path, capsys, monkeypatch):
    bomb = _bomb(tmp_path / "bomb.json.gz", 64 << 20)         # 64 MiB of spaces in ~65 KB
    monkeypatch.setenv("TRACELENS_MAX_INFLATE", "16M")
    code, _, err = run(capsys, bomb)
    assert code == 3 and err.count("\n") == 1 and "bomb.json.gz" in err and "TRACELENS_MAX_INFLATE" in err
    assert f"{16 << 20:,} bytes" in err
    # Under the cap the same kind of file is read (and found empty): the cap is what stopped it.
    monkeypatch.setenv("TRACELENS_MAX_INFLATE", "65M")
    code, _, err = run(capsys, bomb)
    assert code == 3 and "no events" in err
    monkeypatch.setenv("TRACELENS_MAX_INFLATE", "lots")
    code, _, err = run(capsys, bomb)
    assert code == 2 and "TRACELENS_MAX_INFLATE" in err


def test_default_inflate_cap(monkeypatch):
    from tracelens.parsers.kineto.inflate import INFLATE_FLOOR, max_inflate
    monkeypatch.delenv("TRACELENS_MAX_INFLATE", raising=False)
    # 1 GiB floor, else 100x the file: the corpus inflates 9.9-30.3x.
    assert max_inflate(4096) == INFLATE_FLOOR == 1 << 30
    assert max_inflate(100 << 20) == 100 * (100 << 20)
    monkeypatch.setenv("TRACELENS_MAX_INFLATE", "2g")
    assert max_inflate(1) == 2 << 30


def test_a_real_gzip_trace_reads_under_the_default_cap(tmp_path):
    path = tmp_path / "r.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc()).encode()))
    assert steps(report_of(path)) == steps(report_of(write(tmp_path / "r.json", doc())))


def test_huge_ts_plus_dur_is_a_counted_skip(tmp_path, capsys):
    d = doc()
    i = first_kernel(d, comm=True)
    d["traceEvents"][i]["ts"], d["traceEvents"][i]["dur"] = 2**53, 2**53   # each fits int64 ns, the end does not
    code, out, _ = run(capsys, write(tmp_path / "bad.json", d))
    assert code == 0
    assert {w["code"]: w["count"] for w in json.loads(out)["warnings"]}["out-of-range-times"] == 1
    assert steps(report_of(tmp_path / "bad.json")) == steps(report_of(write(tmp_path / "peer.json", without(doc(), i))))


@pytest.mark.parametrize("comm", [False, True])
def test_a_time_in_the_next_century_is_a_counted_skip_and_its_step_stays_exact(tmp_path, capsys, comm):
    # A kernel at 2**62 ns (year 2116) fits int64 and was read: its step lasted 4.6e18 ns. Far from every other
    # time of the trace, it is skipped and counted; the report is the peer's (the file without that kernel).
    d = doc()
    i = first_kernel(d, comm=comm)
    d["traceEvents"][i]["ts"] = (2**62 - d.get("baseTimeNanoseconds", 0)) / 1000
    code, out, _ = run(capsys, write(tmp_path / "bad.json", d))
    assert code == 0 and {w["code"]: w["count"] for w in json.loads(out)["warnings"]}["far-times"] == 1
    got = steps(report_of(tmp_path / "bad.json"))
    assert got == steps(report_of(write(tmp_path / "peer.json", without(doc(), i))))
    assert max(end - start for _, start, end, *_ in got) < 10**9       # one-bucket steps last ms, not a century


@pytest.mark.parametrize("value, read, said", [
    ("TEXT", True, "read as the number"),                                   # the base written as text
    (2**64, False, "ignored: event times read without a base (0)"),         # no int64 holds it
    ("abc", False, "ignored: event times read without a base (0)"),
])
def test_a_header_value_of_the_wrong_type_has_its_own_warning(tmp_path, capsys, value, read, said):
    # Not an event: never counted among malformed events; the warning says what was used in its place.
    d = doc()
    base = d["baseTimeNanoseconds"]           # the generator's: 2026-01-01 in ns
    d["baseTimeNanoseconds"] = str(base) if value == "TEXT" else value
    code, out, _ = run(capsys, write(tmp_path / "h.json", d))
    rep = json.loads(out)
    warned = {w["code"]: w for w in rep["warnings"]}
    assert code == 0 and "malformed-events" not in warned and "coerced-values" not in warned
    assert warned["malformed-header"]["count"] == 1
    assert warned["malformed-header"]["message"].startswith("document fields of the wrong type: baseTimeNanoseconds ")
    assert said in warned["malformed-header"]["message"]
    clean = steps(report_of(write(tmp_path / "clean.json", doc())))
    got = [(s["step"], s["start_ns"]) for s in rep["ranks"][0]["steps"]]
    # Read: the clean file's steps exactly; ignored: the same steps, base less.
    assert got == [(c[0], c[1] - (0 if read else base)) for c in clean]


def test_a_distributed_info_of_the_wrong_type_says_where_the_rank_comes_from(tmp_path, capsys):
    d = doc()
    d["distributedInfo"] = "rank three"
    code, out, _ = run(capsys, write(tmp_path / "rank5.json", d))
    (w,) = [w for w in json.loads(out)["warnings"] if w["code"] == "malformed-header"]
    assert code == 0 and "the rank comes from the file name" in w["message"]
    assert json.loads(out)["ranks"][0]["rank"] == 5


def test_a_world_size_past_2_to_the_20_is_ignored_and_warned(tmp_path, capsys):
    # 2**40 ranks: the cross-rank view once looked for every rank up to it (a hang).
    sc = synth.SCENARIOS["xrank_shared"]
    for r in range(2):
        d = synth.trace_dict(sc, r)
        d.setdefault("distributedInfo", {})["world_size"] = 2**40
        write(tmp_path / f"rank{r}.json", d)
    code, out, _ = run(capsys, tmp_path)
    rep = json.loads(out)
    assert code == 0 and {w["code"] for w in rep["warnings"]} >= {"world-size-implausible"}
    assert [r["world_size"] for r in rep["ranks"]] == [None, None]


@pytest.mark.parametrize("base", [2**63 - 10, -(2**63)])
def test_base_time_that_wraps_every_event_is_exit_3(tmp_path, capsys, base):
    d = doc()
    d["baseTimeNanoseconds"] = base
    code, _, err = run(capsys, write(tmp_path / "bad.json", d))
    assert code == 3 and err.count("\n") == 1 and "int64" in err and "bad.json" in err


def test_duplicate_step_numbers_are_warned_and_explained(tmp_path, capsys):
    d = doc()
    names = [e["name"] for e in d["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    again = next(e for e in d["traceEvents"] if e["name"] == names[-1])
    again["name"] = names[0]                                  # the last step reuses the first one's number
    code, out, _ = run(capsys, write(tmp_path / "dup.json", d))
    rep = json.loads(out)
    warned = {w["code"]: w for w in rep["warnings"]}
    assert code == 0 and warned["duplicate-steps"]["count"] == 1
    assert f"step number {names[0][len('ProfilerStep#'):]} came back" in warned["duplicate-steps"]["message"]
    truth = synth.expected(SC)[0]
    # The first range keeps its number and its numbers (generator truth); the last step is not reported.
    assert [s["step"] for s in rep["ranks"][0]["steps"]] == [t["step"] for t in truth[:-1]]
    assert rep["ranks"][0]["steps"][0]["exposed_comm_ns"] == truth[0]["exposed_comm_ns"]


def test_a_step_whose_number_is_not_a_number_is_warned_by_name(tmp_path, capsys):
    # ProfilerStep#abc is no step (its number says nothing), and vanished without a word: now it is named.
    d = doc()
    names = [e["name"] for e in d["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    renamed = next(e for e in d["traceEvents"] if e["name"] == names[1])
    renamed["name"] = "ProfilerStep#abc"
    code, out, _ = run(capsys, write(tmp_path / "abc.json", d))
    rep = json.loads(out)
    (warned,) = [w for w in rep["warnings"] if w["code"] == "step-name-not-a-number"]
    assert code == 0 and warned["count"] == 1 and "'ProfilerStep#abc'" in warned["message"]
    truth = [t["step"] for t in synth.expected(SC)[0]]
    assert [s["step"] for s in rep["ranks"][0]["steps"]] == truth[:1] + truth[2:]


# --------------------------------------------------------------------------------------------- nsys


def export(tmp_path: Path, name: str = "x") -> Path:
    (path,) = synth.write_nsys(SC, tmp_path / name, per_rank=False)
    return path


def loosen(con: sqlite3.Connection, table: str) -> None:
    """Rebuild ``table`` without column types or constraints, so that any value can be stored."""
    con.execute(f"CREATE TABLE tmp_loose AS SELECT * FROM {table}")
    con.execute(f"DROP TABLE {table}")
    con.execute(f"ALTER TABLE tmp_loose RENAME TO {table}")


def edit(path: Path, *sql: str, loose: tuple = ()) -> Path:
    con = sqlite3.connect(path)
    for t in loose:
        loosen(con, t)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return path


def test_an_nsys_time_in_the_next_century_is_a_counted_skip(tmp_path, capsys):
    path = export(tmp_path)
    con = sqlite3.connect(path)
    base = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    kernel = con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1").fetchone()[0]
    con.close()
    peer = edit(export(tmp_path, "peer"), f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = {kernel}")
    far = 2**62 - base
    edit(path, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = {far}, \"end\" = {far + 1000} WHERE rowid = {kernel}")
    code, out, _ = run(capsys, path)
    assert code == 0 and {w["code"]: w["count"] for w in json.loads(out)["warnings"]}["far-times"] == 1
    assert steps(report_of(path)) == steps(report_of(peer))


def test_string_id_that_is_not_an_integer(tmp_path, capsys):
    path = edit(export(tmp_path), "UPDATE StringIds SET id = 'abc' WHERE id = (SELECT max(id) FROM StringIds)",
                loose=("StringIds",))
    code, out, _ = run(capsys, path)
    assert code == 0
    assert {w["code"]: w["count"] for w in json.loads(out)["warnings"]}["nsys-bad-string-ids"] == 1


def test_non_utf8_table_and_column_names(tmp_path, capsys):
    path = export(tmp_path)
    clean = steps(report_of(path))
    edit(path, "CREATE TABLE latin (a)", "PRAGMA writable_schema = ON",
         "UPDATE sqlite_master SET name = CAST(x'6cff' AS TEXT), tbl_name = CAST(x'6cff' AS TEXT), "
         "sql = CAST(x'435245415445205441424c4520226cff222028612029' AS TEXT) WHERE name = 'latin'",
         # A column of a table that is read, renamed to latin-1 bytes: it reads as missing, never as a crash.
         "UPDATE sqlite_master SET sql = CAST(replace(CAST(sql AS BLOB), CAST('gridX' AS BLOB), x'67ff') AS TEXT) "
         "WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'")
    code, _, _ = run(capsys, path)
    assert code == 0 and steps(report_of(path)) == clean


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_damaged_export_is_one_line_exit_3(tmp_path, capsys, damage):
    path = export(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:len(data) // 2]
    else:
        for at in range(2 * 4096, len(data), 4096):            # every page but the schema's, torn mid-page
            data[at + 8:at + 64] = b"\xa5" * 56
    path.write_bytes(bytes(data))
    code, _, err = run(capsys, path)
    assert code == 3 and err.count("\n") == 1 and path.name in err


def test_null_start_on_a_comm_kernel_is_a_counted_skip(tmp_path, capsys):
    comm = ("SELECT min(k.rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
            "WHERE s.value LIKE 'nccl%'")
    path = edit(export(tmp_path, "null"), f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL WHERE rowid = ({comm})",
                loose=("CUPTI_ACTIVITY_KIND_KERNEL",))
    peer = edit(export(tmp_path, "peer"), f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = ({comm})")
    code, out, _ = run(capsys, path)
    warned = {(w["code"], w["rank"]): w["count"] for w in json.loads(out)["warnings"]}
    assert code == 0 and sum(n for (c, _), n in warned.items() if c == "nsys-untimed-rows") == 1
    # Never a kernel starting at -1 ns: the numbers are those of the export without that row.
    assert steps(report_of(path)) == steps(report_of(peer))
    assert steps(report_of(peer)) != steps(report_of(export(tmp_path, "clean")))


def test_epoch_offset_that_wraps_int64_is_exit_3(tmp_path, capsys):
    path = edit(export(tmp_path), "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 9223372036854775000")
    code, _, err = run(capsys, path)
    assert code == 3 and err.count("\n") == 1 and "int64" in err


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_wal_export_leaves_its_folder_byte_identical(tmp_path, capsys):
    path = edit(export(tmp_path), "PRAGMA journal_mode = WAL")
    clean = steps(report_of(export(tmp_path, "clean")))
    before = tree_digest(path.parent)
    assert run(capsys, path)[0] == 0
    assert tree_digest(path.parent) == before             # no -shm, no -wal, no journal
    assert steps(report_of(path)) == clean


def test_wal_with_pending_transactions_is_read_from_a_copy(tmp_path, capsys):
    path = export(tmp_path)
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    # A pending transaction that only the -wal holds: the export's comm kernels removed.
    writer.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName IN "
                   "(SELECT id FROM StringIds WHERE value LIKE 'nccl%')")
    writer.commit()
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    for p in path.parent.iterdir():
        (snapshot / p.name).write_bytes(p.read_bytes())
    writer.close()    # would checkpoint: the report reads the snapshot, whose -wal still holds the delete
    before = tree_digest(snapshot)
    code, out, _ = run(capsys, snapshot / path.name)
    assert code == 0 and tree_digest(snapshot) == before
    assert all(s["comm_ns"] == 0 for r in json.loads(out)["ranks"] for s in r["steps"])


FAKE = """#!{python}
import sys
out = sys.argv[sys.argv.index("--output") + 1]
{body}
"""


def fake_nsys(folder: Path, body: str) -> Path:
    import sys
    exe = folder / "nsys"
    exe.write_text(FAKE.format(python=sys.executable, body=body))
    exe.chmod(0o755)
    return exe


def test_garbage_export_is_never_cached(tmp_path, capsys, monkeypatch):
    good = export(tmp_path, "src")
    monkeypatch.delenv("TRACELENS_CACHE")         # the XDG location, as without TRACELENS_CACHE
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rep = run_dir / "profile.nsys-rep"
    rep.write_bytes(b"only nsys reads this")
    before = tree_digest(run_dir)
    # A converter that succeeds but writes garbage (TRACELENS_NSYS pointing at the wrong program).
    monkeypatch.setenv("TRACELENS_NSYS", str(fake_nsys(tmp_path, "open(out, 'wb').write(b'garbage' * 999)")))
    code, _, err = run(capsys, rep)
    assert code == 3 and err.count("\n") == 1 and "no usable export" in err
    assert not list((tmp_path / "cache").rglob("*.sqlite")) and tree_digest(run_dir) == before
    # The right converter: exported, cached (never beside the report), and reused.
    exe = fake_nsys(tmp_path, f"import shutil; shutil.copyfile({str(good)!r}, out)")
    monkeypatch.setenv("TRACELENS_NSYS", str(exe))
    assert run(capsys, rep)[0] == 0
    (cached,) = (tmp_path / "cache").rglob("*.sqlite")
    assert tree_digest(run_dir) == before
    # A cached export that has gone bad is not reused: it is made again.
    cached.write_bytes(b"garbage")
    assert run(capsys, rep)[0] == 0 and tracelens.load(str(rep))
