"""Nsight Systems exports: parity with Kineto on generated runs, .nsys-rep conversion, bad input."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import stat
import sys
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracelens
from tracelens.cli import main
from tracelens.errors import InputError
from tracelens.parsers.nsys import rows as nsys_rows, sql as nsys_sql

from fixtures import synth
from fixtures.fake_nsys import fake_nsys

STEP_KEYS = ("step", "start_ns", "end_ns", "duration_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns",
             "idle_ns", "overlap_pct", "exposed_comm_fraction")


def report(path, **kw):
    return tracelens.analyze(tracelens.load(str(path), **kw))


def steps_of(rep):
    return {r.rank: [{k: getattr(s, k) for k in STEP_KEYS} for s in r.steps] for r in rep.ranks}


@pytest.mark.parametrize("name", sorted(synth.SCENARIOS))
def test_nsys_and_kineto_reports_agree_to_the_ns(name, tmp_path):
    sc = synth.SCENARIOS[name]
    synth.write(sc, tmp_path / "kineto")
    synth.write_nsys(sc, tmp_path / "nsys")
    kin, ns = report(tmp_path / "kineto"), report(tmp_path / "nsys")
    assert steps_of(ns) == steps_of(kin)
    if sc.subgroups:
        # The export holds no process group (no NCCL payload): collectives are matched in stream order across
        # every rank, so subgroups' waits for peers, and with them the perfect-overlap step, are not the traces'.
        assert [msgspec.structs.replace(r.totals, perfect_overlap_step_ns=0) for r in ns.ranks] == \
            [msgspec.structs.replace(r.totals, perfect_overlap_step_ns=0) for r in kin.ranks]
    else:
        assert [r.totals for r in ns.ranks] == [r.totals for r in kin.ranks]
    assert {i.format for i in ns.inputs} == {"nsys"}
    # And both equal the generator's arithmetic truth.
    truth = synth.expected(sc)
    for r in ns.ranks:
        got = [{k: getattr(s, k) for k in truth[r.rank][0]} for s in r.steps]
        assert got == truth[r.rank]
    # Kernels are matched to launches: every comm kernel is a collective with its op from nccl:all_reduce.
    assert {c.op for c in ns.collectives} == {"all_reduce"}
    assert all(c.bytes is None for c in ns.collectives)  # no NCCL payload in the export: unknown, not guessed


def test_one_file_with_every_rank(tmp_path):
    sc = synth.SCENARIOS["straggler"]
    (path,) = synth.write_nsys(sc, tmp_path, per_rank=False)
    con = sqlite3.connect(path)
    # The ranks reuse correlation ids: only a (process, correlation) join links kernels correctly.
    dup = con.execute("SELECT count(*) FROM (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                      "GROUP BY correlationId HAVING count(DISTINCT globalTid >> 24) > 1)").fetchone()[0]
    con.close()
    assert dup > 0
    traces = tracelens.load(str(path))
    assert [t.meta.rank for t in traces] == [0, 1, 2, 3]
    assert {t.meta.rank_rule for t in traces} == {"environment"}
    assert all((t.device_ops["launch_idx"] >= 0).all() for t in traces)
    # Names read as in Kineto: torch's ", seq = N, op_id = N" suffix and the API's "_v7000" are dropped.
    names = set(traces[0].host_ops["name"].tolist())
    assert {"aten::mm", "nccl:all_reduce", "ncclAllReduce", "cudaLaunchKernel", "ProfilerStep#2"} <= names
    assert not any("op_id" in n or "_v7000" in n for n in names)
    cats = traces[0].host_ops.to_pandas().groupby("name", observed=True)["cat"].first().astype(str)
    assert (cats["aten::mm"], cats["ncclAllReduce"], cats["cudaLaunchKernel"]) == \
        ("cpu_op", "user_annotation", "cuda_runtime")
    synth.write(sc, tmp_path / "kineto")
    assert steps_of(tracelens.analyze(traces)) == steps_of(report(tmp_path / "kineto"))


def test_export_is_opened_read_only(tmp_path):
    (path,) = synth.write_nsys(synth.SCENARIOS["one_bucket"], tmp_path, per_rank=False)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    path.chmod(stat.S_IRUSR)
    try:
        assert len(tracelens.load(str(path))) == 2
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not (tmp_path / "all_ranks.sqlite-journal").exists()


def test_step_ranges_from_a_user_regex(tmp_path):
    sc = synth.SCENARIOS["compute_bound_8"]
    (path,) = synth.write_nsys(sc, tmp_path, per_rank=False)
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = replace(text, 'ProfilerStep#', 'train_step ') "
                "WHERE text LIKE 'ProfilerStep#%'")
    con.commit()
    con.close()
    # Without the regex: no marked steps, so they are inferred from the device work (3 per rank, the
    # generator's), or the whole capture is one step when only markers are asked for.
    plain = report(path)
    assert [(r.steps_from, len(r.steps)) for r in plain.ranks] == [("inferred", 3)] * 2
    only_markers = tracelens.report(path, steps_from="markers", cache=False)
    assert [(r.steps_from, len(r.steps)) for r in only_markers.ranks] == [("whole-capture", 1)] * 2
    assert any(w.code == "no-steps" for w in only_markers.warnings)
    by_regex = report(path, step_nvtx=r"^train_step (\d+)$")
    truth = synth.expected(sc)
    assert [[s.step for s in r.steps] for r in by_regex.ranks] == [[t["step"] for t in truth[r]] for r in (0, 1)]
    assert [[s.exposed_comm_ns for s in r.steps] for r in by_regex.ranks] == \
        [[t["exposed_comm_ns"] for t in truth[r]] for r in (0, 1)]


# --------------------------------------------------------------------------------------------- .nsys-rep

def test_nsys_rep_is_converted_once_and_cached(tmp_path, monkeypatch):
    (export,) = synth.write_nsys(synth.SCENARIOS["one_bucket"], tmp_path / "src", per_rank=False)
    exe, log = fake_nsys(tmp_path, export)
    monkeypatch.setenv("TRACELENS_NSYS", str(exe))
    monkeypatch.delenv("TRACELENS_CACHE")         # the XDG location, as without TRACELENS_CACHE
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    run = tmp_path / "run"
    run.mkdir()
    rep = run / "profile.nsys-rep"
    rep.write_bytes(b"not parsed by tracelens: only nsys reads it")
    first = report(rep)
    # The export goes to the cache, never beside the report: a report leaves its input folder as it was.
    assert sorted(p.name for p in run.iterdir()) == ["profile.nsys-rep"]
    (cached,) = (tmp_path / "cache" / "tracelens" / "nsys").glob("profile-*.sqlite")
    assert len(log.read_text().splitlines()) == 1
    assert "--include-blobs true" in log.read_text()         # NCCL's payloads (collective sizes) are kept
    assert steps_of(first) == steps_of(report(export))
    assert [i.path for i in first.inputs] == [str(rep), str(rep)]
    # Unchanged report: the export is reused; the folder holding both is read once, through the report.
    report(run)
    assert len(tracelens.load(str(run))) == 2
    assert len(log.read_text().splitlines()) == 1
    # A newer report is exported again.
    later = cached.stat().st_mtime_ns + 5_000_000_000
    os.utime(rep, ns=(later, later))
    report(rep)
    assert len(log.read_text().splitlines()) == 2


def test_nsys_without_the_blobs_option_still_exports(tmp_path, monkeypatch):
    # An nsys that rejects --include-blobs (the option is newer than some releases): exported without it.
    (export,) = synth.write_nsys(synth.SCENARIOS["one_bucket"], tmp_path / "src", per_rank=False)
    exe, log = fake_nsys(tmp_path, export)
    exe.write_text(exe.read_text().replace("if False:", "if '--include-blobs' in args:\n"
                                           "    print('unknown option: --include-blobs', file=sys.stderr)\n"
                                           "    sys.exit(2)\nif False:"))
    monkeypatch.setenv("TRACELENS_NSYS", str(exe))
    rep = tmp_path / "profile.nsys-rep"
    rep.write_bytes(b"x")
    assert steps_of(report(rep)) == steps_of(report(export))
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and "--include-blobs" in calls[0] and "--include-blobs" not in calls[1]


def test_nsys_missing_or_failing(tmp_path, monkeypatch, capsys):
    rep = tmp_path / "profile.nsys-rep"
    rep.write_bytes(b"x")
    monkeypatch.setenv("TRACELENS_NSYS", "")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["report", str(rep)]) == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "install" in err and "Nsight Systems" in err and ".sqlite" in err
    (export,) = synth.write_nsys(synth.SCENARIOS["one_bucket"], tmp_path / "src", per_rank=False)
    exe, _ = fake_nsys(tmp_path, export, fail=True)
    monkeypatch.setenv("TRACELENS_NSYS", str(exe))
    assert main(["report", str(rep)]) == 3
    err = capsys.readouterr().err
    assert "nsys export` failed (exit 1): fake nsys: cannot open report" in err
    assert not list(tmp_path.glob("*.tmp.sqlite"))


# --------------------------------------------------------------------------------------------- bad input

def test_bad_exports_give_one_line_errors(tmp_path, capsys):
    not_db = tmp_path / "junk.sqlite"
    not_db.write_bytes(b"this is not a database" * 100)
    assert main(["report", str(not_db)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "junk.sqlite" in err and "SQLite" in err

    no_kernels = tmp_path / "cpu_only.sqlite"
    con = sqlite3.connect(no_kernels)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.close()
    assert main(["report", str(no_kernels)]) == 3
    assert "no CUPTI_ACTIVITY_KIND_KERNEL table" in capsys.readouterr().err


def test_non_utf8_strings_are_replaced_not_fatal(tmp_path):
    (path,) = synth.write_nsys(synth.SCENARIOS["one_bucket"], tmp_path, per_rank=False)
    con = sqlite3.connect(path)
    # A latin-1 thread name, as in a Windows export (nsys-sqlite.md gotcha 7).
    con.execute("UPDATE StringIds SET value = CAST(x'4a6f73e9' AS TEXT) WHERE value = 'python3'")
    con.commit()
    con.close()
    traces = tracelens.load(str(path))
    assert "Jos\ufffd" in set(traces[0].threads["name"])


def _table(tmp_path, rows):
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a, b, s)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()
    return nsys_sql.ExportDb(path)


def test_columns_read_whole_match_row_by_row(tmp_path):
    rows = [(-1, 2**62, "aten::mm, seq = 3"), (0, 7, ""), (5, -(2**63), "x,y")]
    db = _table(tmp_path, rows)
    a, b, s = db.select("SELECT a, b, s FROM t ORDER BY rowid", "iit")
    assert a.tolist() == [-1, 0, 5] and b.tolist() == [2**62, 7, -(2**63)] and s == ["aten::mm, seq = 3", "", "x,y"]
    # The same text split inside Arrow ("a"): the same values, empty strings kept.
    (arrow,) = db.select("SELECT s FROM t ORDER BY rowid", "a")
    assert arrow.to_pylist() == ["aten::mm, seq = 3", "", "x,y"]
    assert [c.tolist() for c in db.select("SELECT a, b FROM t WHERE a > 99", "ii")] == [[], []]
    assert db.ints("SELECT a, b FROM t ORDER BY rowid", 2).tolist() == [[-1, 2**62], [0, 7], [5, -(2**63)]]


def test_columns_that_cannot_be_aggregated_go_row_by_row(tmp_path):
    # A text holding the aggregate's separator, and a REAL in an integer column: both read as by a plain
    # cursor (the REAL truncated, as numpy converts it).
    db = _table(tmp_path, [(1.5, 2, "a\x1fb"), (3, 4, "c")])
    a, b, s = db.select("SELECT a, b, s FROM t ORDER BY rowid", "iit")
    assert a.tolist() == [1, 3] and b.tolist() == [2, 4] and s == ["a\x1fb", "c"]
    (arrow,) = db.select("SELECT s FROM t ORDER BY rowid", "a")
    assert arrow.to_pylist() == ["a\x1fb", "c"]
    assert db.select("SELECT s FROM t WHERE a > 99", "a")[0].to_pylist() == []


def test_non_integer_value_is_an_input_error(tmp_path):
    db = _table(tmp_path, [("abc", 2, "")])
    with pytest.raises(InputError, match="non-integer"):
        db.select("SELECT a, b FROM t", "ii")


def test_non_utf8_nvtx_text_is_replaced(tmp_path):
    (path,) = synth.write_nsys(synth.SCENARIOS["one_bucket"], tmp_path, per_rank=False)
    con = sqlite3.connect(path)
    text = "text" if "text" in {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")} else None
    if text:
        con.execute("UPDATE NVTX_EVENTS SET text = CAST(x'4a6f73e9' AS TEXT) WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 59)")
    else:
        con.execute("UPDATE StringIds SET value = CAST(x'4a6f73e9' AS TEXT) "
                    "WHERE id = (SELECT textId FROM NVTX_EVENTS WHERE eventType = 59 LIMIT 1)")
    con.commit()
    con.close()
    names = set(tracelens.load(str(path))[0].host_ops["name"])
    assert "Jos\ufffd" in names


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


_FRAGMENTS = [", op_id = ", ", seq = ", ", sizes = ", ", input_op_ids = ", ", ", "op_id", " = ", ",", "\n", "aten::mm",
              "7", "[[2, 3]]", "ü", "x"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_FRAGMENTS), max_size=7).map("".join), min_size=1, max_size=12))
def test_torch_suffix_cut_equals_the_regex_on_every_text(texts):
    # The NVTX names are cleaned by a split at ", op_id = " and the regex on what is left; the definition is
    # the regex on the whole text (and a text it shortened is a torch op, cpu_op).
    n = len(texts)
    out = nsys_rows.host_rows({"nvtx": _Done((np.arange(n), np.arange(n) + 1, np.zeros(n, np.int64), texts))}, {})
    names = [out["name"].categories[c] for c in out["name"].codes]
    cats = [out["cat"].categories[c] for c in out["cat"].codes]
    want = [re.sub(r"(?s), (?:seq|op_id|sizes|input_op_ids) = .*$", "", t) for t in texts]
    assert names == want
    assert cats == ["cpu_op" if w != t else "user_annotation" for w, t in zip(want, texts)]


# --------------------------------------------------------------------------------------------- real exports

from conftest import CORPUS, corpus_file  # noqa: E402

NSYS_FILES = ["extrap/con_kernel.sqlite", "extrap/concurrent_s16_profile16.sqlite", "extrap/ex-gpu.s10.sqlite",
              "nsys-ai/h100_2gpu_1s.sqlite", "nsys-ai/healthy_1pct_minimal.sqlite",
              "nsys-ai/mfu_2gpu_before.sqlite", "nsys-ai/mock_rtx3080.sqlite",
              "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"]


def test_corpus_list_is_complete():
    if not (CORPUS / "nsys").is_dir():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    assert sorted(str(p.relative_to(CORPUS / "nsys")) for p in (CORPUS / "nsys").rglob("*.sqlite")) == NSYS_FILES


@pytest.mark.parametrize("rel", NSYS_FILES)
def test_every_corpus_export_reports(rel, capsys):
    path = corpus_file(f"nsys/{rel}")
    assert main(["report", str(path), "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "NaN" not in out and '"format":"nsys"' in out.replace(" ", "")


def test_mfu_sendrecv_on_the_compute_stream_is_all_exposed():
    # nsys-sqlite.md §9 (interval unions per device, by hand with sqlite3): dev 0 comm 17.17 ms, compute
    # 253.69 ms over a 299.85 ms span; dev 1 comm 8.23 ms; overlap exactly 0 (NCCL on the compute stream).
    rep = report(corpus_file("nsys/nsys-ai/mfu_2gpu_before.sqlite"))
    assert [r.device for r in rep.ranks] == [0, 1]
    t0, t1 = rep.ranks[0].totals, rep.ranks[1].totals
    assert (round(t0.comm_ns / 1e6, 2), round(t0.compute_ns / 1e6, 2), round(t0.duration_ns / 1e6, 2)) == \
        (17.17, 253.69, 299.85)
    assert round(t1.comm_ns / 1e6, 2) == 8.23
    for t in (t0, t1):
        assert t.overlap_ns == 0 and t.exposed_comm_ns == t.comm_ns and t.overlap_pct == 0.0
    # 33 SendRecv kernels per device (corpus INVENTORY: 66 in the file). 32 of each were launched inside
    # a nccl:all_to_all range; the window cut one launch per process off, whose op comes from the kernel name.
    assert [sum(c.rank == r for c in rep.collectives) for r in (0, 1)] == [33, 33]
    assert [sum(c.rank == r and c.op == "all_to_all" for c in rep.collectives) for r in (0, 1)] == [32, 32]
    assert {c.op for c in rep.collectives} == {"all_to_all", "send_recv"}


def test_nccl_payload_sizes_unavailable_without_blobs(tmp_path):
    # mfu_2gpu_before's NCCL domain (domainId 1) has payload schemas with "Message size [bytes]" but was
    # exported with EXPORT_PARAM_INCLUDE_BLOBS=false: binaryData is NULL. Its NCCL push/pop ranges per
    # process, by hand: SELECT globalTid >> 24, count(*) FROM NVTX_EVENTS WHERE domainId = 1 GROUP BY 1
    # -> 224 and 238 (462 in all).
    src = corpus_file("nsys/nsys-ai/mfu_2gpu_before.sqlite")
    rep = report(src)
    got = {w.rank: (w.code, w.count) for w in rep.warnings if w.code.startswith("nsys-nccl-payload")}
    assert got == {0: ("nsys-nccl-payload-unavailable", 224), 1: ("nsys-nccl-payload-unavailable", 238)}
    assert all(c.bytes is None for c in rep.collectives)            # unknown, never guessed
    msg = next(w.message for w in rep.warnings if w.code == "nsys-nccl-payload-unavailable")
    # The export's own parameters and file names (META_DATA_EXPORT) give the exact command that keeps them.
    assert "EXPORT_PARAM_INCLUDE_BLOBS=false" in msg and msg.endswith(
        "nsys export --type sqlite --include-blobs true --force-overwrite true --output mfu_h1002_nsys.sqlite "
        "mfu_h1002_nsys.nsys-rep")
    # The same export with an 8-byte blob on every NCCL range: shorter than nsys' 32-byte blob header, so
    # present but undecodable, counted per range, and still no sizes.
    copy = tmp_path / "with_blobs.sqlite"
    copy.write_bytes(src.read_bytes())
    con = sqlite3.connect(copy)
    con.execute("UPDATE NVTX_EVENTS SET binaryData = x'0100000000000000' WHERE domainId = 1")
    con.commit()
    con.close()
    rep = report(copy)
    got = {w.rank: (w.code, w.count) for w in rep.warnings if w.code.startswith("nsys-nccl-payload")}
    assert got == {0: ("nsys-nccl-payload-undecodable", 224), 1: ("nsys-nccl-payload-undecodable", 238)}
    assert all(c.bytes is None for c in rep.collectives)


def test_h100_stream_synchronize_is_kept():
    # nsys-sqlite.md §8: 8 cudaStreamSynchronize calls, 857 ms in total, the longest 428 ms (4 per process).
    traces = tracelens.load(str(corpus_file("nsys/nsys-ai/h100_2gpu_1s.sqlite")))
    calls = [t.host_ops[t.host_ops["name"] == "cudaStreamSynchronize"] for t in traces]
    durations = [d for c in calls for d in (c["end_ns"] - c["start_ns"]).tolist()]
    assert len(durations) == 8 and round(sum(durations) / 1e6) == 857 and round(max(durations) / 1e6) == 428
    for t in traces:  # their GPU-side records are sync rows named after the API that made them
        sync = t.device_ops[t.device_ops["kind"] == "sync"]
        assert (sync["name"] == "Stream Sync").sum() == 4


def test_old_exports_without_metadata_and_with_backtrace_duplicates():
    # ex-gpu.s10: no META_DATA table (<= 2021). saxpy (2.9.1): every API call is written twice (eventClass 67
    # + 0); corpus.md counts 15 synchronous cudaMemcpy calls (374 ms), which must not double.
    old = tracelens.load(str(corpus_file("nsys/extrap/ex-gpu.s10.sqlite")))
    assert len(old) == 1 and len(old[0].device_ops) > 0
    (saxpy,) = tracelens.load(str(corpus_file("nsys/pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite")))
    memcpy = saxpy.host_ops[saxpy.host_ops["name"] == "cudaMemcpy"]
    assert len(memcpy) == 15 and round((memcpy["end_ns"] - memcpy["start_ns"]).sum() / 1e6) == 374


def test_minimal_synthetic_export_degrades_to_warnings():
    rep = report(corpus_file("nsys/nsys-ai/healthy_1pct_minimal.sqlite"))
    codes = {w.code for w in rep.warnings}
    assert {"nsys-no-process-column", "nsys-no-event-class", "nsys-no-nvtx"} <= codes
    # 400 kernels on one stream (corpus.md): all compute, no comm, null overlap.
    assert rep.ranks[0].totals.comm_ns == 0 and rep.ranks[0].totals.overlap_pct is None
