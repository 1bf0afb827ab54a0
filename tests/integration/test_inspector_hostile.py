"""Hostile NCCL Inspector logs (issue 47) end to end through ``tracelens report``: each case a counted warning in
the JSON report (exit 0) or a one-line error with its documented exit code; never a traceback, a NaN or a changed
input file.

Each case takes the synthetic writer's logs of ``xrank_shared`` (four ranks, one communicator) and spoils rank 0's
log in one way; the report's matched collectives say what was lost (the spoiled records only).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from fixtures import synth
from fixtures.synth.inspector import write_inspector
from tracelens.cli import main
from tracelens.model.meta import MAX_WORLD
from tracelens.parsers.nccl.inspector import MAX_LINE

SC = synth.SCENARIOS["xrank_shared"]
ALL = SC.steps * len(SC.buckets)            # each rank's collectives: every one is matched on a clean run
DAY_US = 24 * 3600 * 10**6


def run(capsys, *args):
    code = main(["report", "--format", "json", *map(str, args)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def report(capsys, folder: Path) -> tuple[dict, dict]:
    """The JSON report of the folder (exit 0, no NaN or infinity anywhere) and its warnings, code -> count."""
    before = _digests(folder)
    code, out, err = run(capsys, folder)
    assert code == 0, err
    assert _digests(folder) == before                 # the inputs are never modified
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the report"))
    return doc, {w["code"]: w["count"] for w in doc["warnings"]}


def _digests(folder: Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def logs(tmp_path: Path, **kw) -> list[Path]:
    return write_inspector(SC, tmp_path, **kw)


def spoil(path: Path, at: int, edit) -> None:
    """Line ``at`` of the log, as a record, changed by ``edit`` (which returns the record, or the line's bytes)."""
    lines = path.read_bytes().split(b"\n")
    got = edit(json.loads(lines[at]))
    lines[at] = got if isinstance(got, bytes) else json.dumps(got).encode()
    path.write_bytes(b"\n".join(lines))


def matched(doc: dict) -> int:
    return doc["cross_rank"]["matching"]["matched"]


def test_a_clean_run_matches_every_collective(tmp_path, capsys):
    logs(tmp_path)
    doc, warned = report(capsys, tmp_path)
    assert matched(doc) == ALL and not [c for c in warned if c.startswith("inspector")]


def test_a_line_longer_than_max_line_is_skipped_and_counted(tmp_path, capsys):
    paths = logs(tmp_path)
    spoil(paths[0], 3, lambda rec: json.dumps({**rec, "pad": "x" * MAX_LINE}).encode())
    doc, warned = report(capsys, tmp_path)
    assert warned["inspector-line-too-long"] == 1
    assert matched(doc) == ALL - 1                     # that collective lacks rank 0: the others are whole


@pytest.mark.parametrize("edit", [
    lambda rec: {**rec, "header": {**rec["header"], "rank": "0"}},              # a string where an int goes
    lambda rec: {**rec, "header": {**rec["header"], "n_ranks": True}},          # a bool
    lambda rec: {**rec, "coll_perf": {**rec["coll_perf"], "coll_msg_size_bytes": -1}},
    lambda rec: {**rec, "coll_perf": {**rec["coll_perf"], "coll_sn": 2**64}},  # past int64
    lambda rec: {**rec, "coll_perf": {**rec["coll_perf"], "coll_exec_time_us": 0}},   # a kernel that ran
    lambda rec: {**rec, "header": {**rec["header"], "rank": 4}},                # rank >= n_ranks
    lambda rec: {**rec, "coll_perf": {**rec["coll_perf"], "event_trace_ts": {
        "kernel_events": [{"kernel_start_ts": 2**62, "kernel_stop_ts": 2**62}]}}},   # overflows int64 in ns
], ids=["string", "bool", "negative-size", "past-int64", "zero-exec", "rank-out", "ts-overflow"])
def test_an_impossible_value_costs_its_record(tmp_path, capsys, edit):
    paths = logs(tmp_path)
    spoil(paths[0], 3, edit)
    doc, warned = report(capsys, tmp_path)
    assert warned["inspector-bad-record"] == 1 and matched(doc) == ALL - 1


@pytest.mark.parametrize("line, code", [
    (b'{"header":' * 5000 + b"1" + b"}" * 5000, "inspector-not-json"),           # nested past the decoder
    (b'{"coll_perf": {"coll_busbw_gbs": 1e400}}', "inspector-not-json"),        # infinity
    (b"\x00\xff garbage", "inspector-not-json"),
], ids=["deep", "inf", "binary"])
def test_a_line_that_is_not_json_costs_itself(tmp_path, capsys, line, code):
    paths = logs(tmp_path)
    spoil(paths[0], 3, lambda rec: line)
    doc, warned = report(capsys, tmp_path)
    assert warned[code] == 1 and matched(doc) == ALL - 1


def test_a_communicator_of_more_than_2_to_the_20_ranks(tmp_path, capsys):
    paths = logs(tmp_path)
    spoil(paths[0], 3, lambda rec: {**rec, "header": {**rec["header"], "n_ranks": MAX_WORLD + 1}})
    doc, warned = report(capsys, tmp_path)
    assert warned["world-size-implausible"] == 1 and matched(doc) == ALL - 1
    assert doc["ranks"] == [] and len(doc["inspector"]["ranks"]) == SC.ranks


def test_kernel_times_a_day_away_are_left_out(tmp_path, capsys):
    paths = logs(tmp_path)

    def jump(rec):
        for k in rec["coll_perf"]["event_trace_ts"]["kernel_events"]:
            k["kernel_start_ts"] += 2 * DAY_US
            k["kernel_stop_ts"] += 2 * DAY_US
        return rec
    spoil(paths[0], 3, jump)
    doc, warned = report(capsys, tmp_path)
    assert warned["inspector-far-times"] == 1 and matched(doc) == ALL - 1


def test_an_unknown_version_is_read_and_counted(tmp_path, capsys):
    paths = logs(tmp_path)
    spoil(paths[0], 3, lambda rec: {**rec, "metadata": {**rec["metadata"],
                                                        "inspector_output_format_version": "v9.1"}})
    doc, warned = report(capsys, tmp_path)
    assert warned["inspector-unknown-version"] == 1 and matched(doc) == ALL
    assert "v9.1" in next(w["message"] for w in doc["warnings"] if w["code"] == "inspector-unknown-version")


@pytest.mark.parametrize("gz", [False, True])
def test_a_last_line_cut_short(tmp_path, capsys, gz):
    paths = logs(tmp_path, gz=gz)
    data = gzip.decompress(paths[0].read_bytes()) if gz else paths[0].read_bytes()
    cut = data[:len(data) - 60]                         # the last record, cut in its middle
    paths[0].write_bytes(gzip.compress(cut) if gz else cut)
    doc, warned = report(capsys, tmp_path)
    assert warned["inspector-truncated"] == 1 and matched(doc) == ALL - 1


def test_a_gzip_log_cut_short_keeps_what_came_before(tmp_path, capsys):
    paths = logs(tmp_path, gz=True)
    data = paths[0].read_bytes()
    paths[0].write_bytes(data[:len(data) * 2 // 3])
    doc, warned = report(capsys, tmp_path)
    assert warned["inspector-truncated"] == 1 and 0 < matched(doc) < ALL


def add_lone(path: Path, comm: str) -> None:
    """A record of rank 0 alone in a second communicator of two ranks, appended to its log."""
    lone = json.loads(path.read_text().splitlines()[0])
    lone["header"].update(id=comm, n_ranks=2)
    with open(path, "a") as fh:
        fh.write(json.dumps(lone) + "\n")


def test_a_communicator_seen_by_one_rank(tmp_path, capsys):
    paths = logs(tmp_path)
    add_lone(paths[0], "0xdead")
    doc, warned = report(capsys, tmp_path)
    assert warned["inspector-lone-communicator"] == 1 and matched(doc) == ALL


@pytest.mark.parametrize("how", ["bad-records", "not-json", "too-long"])
def test_logs_without_one_readable_record_are_one_line_exit_3(tmp_path, capsys, how):
    paths = logs(tmp_path)
    for path in paths:
        lines = path.read_bytes().split(b"\n")
        first = json.loads(lines[0])
        if how == "bad-records":
            first["header"]["n_ranks"] = -1
            body = [json.dumps(first).encode()] * 3
        elif how == "not-json":        # the first line still says Inspector (else the file is not one: exit 2)
            first["coll_perf"]["coll_sn"] = "x"
            body = [json.dumps(first).encode(), b"{not json", b"[" * 5000, json.dumps(first).encode()[:-9]]
        else:
            body = [json.dumps({**first, "pad": "x" * MAX_LINE}).encode()]
        path.write_bytes(b"\n".join(body) + b"\n")
    before = _digests(tmp_path)
    code, out, err = run(capsys, tmp_path)
    assert code == 3 and out == "" and err.count("\n") == 1, err
    assert "no readable NCCL Inspector record" in err and str(paths[0]) in err
    assert _digests(tmp_path) == before


def test_a_communicator_id_with_control_characters_stays_one_line_in_its_warning(tmp_path, capsys):
    paths = logs(tmp_path)
    add_lone(paths[0], "0xde\nad\x1b[31m")
    doc, warned = report(capsys, tmp_path)
    (w,) = [w for w in doc["warnings"] if w["code"] == "inspector-lone-communicator"]
    assert w["message"].isprintable() and "0xde\\x0aad\\x1b[31m" in w["message"]


def test_a_gzip_bomb_of_records_is_read_only_up_to_the_inflate_bound(tmp_path, monkeypatch):
    # Real-shaped records repeated: a few KB of gzip that would inflate without end fill memory with their rows.
    # The bound of gzip traces (TRACELENS_MAX_INFLATE, here 1 MiB) holds: the records before it are read, the
    # cut is said, and the last line the bound cut is not taken for one cut short while written.
    import gzip

    from fixtures.synth import SCENARIOS
    from fixtures.synth.inspector import write_inspector
    from tracelens import api
    from tracelens.parsers.nccl import parse_inspector

    (log,) = write_inspector(SCENARIOS["xrank_shared"], tmp_path / "one", ranks=[0])
    line = log.read_bytes().splitlines(keepends=True)[0]
    copies = (4 << 20) // len(line)                       # 4 MiB of records, four times the bound
    bomb = tmp_path / "logs" / "nccl-inspector-1" / "node0-pid1.log.gz"
    bomb.parent.mkdir(parents=True)
    bomb.write_bytes(gzip.compress(line * copies, mtime=0))
    monkeypatch.setenv("TRACELENS_MAX_INFLATE", "1M")
    got = parse_inspector(bomb)
    assert got.inflate_cap == 1 << 20 and not got.truncated
    assert got.records == (1 << 20) // len(line)          # whole lines within the first MiB
    rep = api.report([str(bomb.parent)], cache=False)
    (w,) = [w for w in rep.warnings if w.code == "inspector-inflate-capped"]
    assert w.count == 1 and "TRACELENS_MAX_INFLATE" in w.message and "1,048,576 bytes" in w.message
    monkeypatch.setenv("TRACELENS_MAX_INFLATE", "8M")     # room for all of it: read whole, nothing said
    whole = parse_inspector(bomb)
    assert whole.inflate_cap == 0 and whole.records == copies
