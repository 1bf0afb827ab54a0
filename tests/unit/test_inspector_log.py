"""The NCCL Inspector parser (parsers/nccl/inspector.py) on hand-made lines and the synthetic writer's logs: every
format version, gzip, many processes per file, hostile lines; and what is not Inspector output."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from fixtures import synth
from fixtures.synth.inspector import COMM_ID, PID_BASE, records, write_inspector
from tracelens.parsers.nccl import parse_inspector, sniff_inspector

# NVIDIA's README example (plugins/profiler/inspector/README.md, "Output Example Verbose"), v4.0, one line.
README_VERBOSE = {
    "header": {"id": "0xe62dedaa97644a", "rank": 4, "n_ranks": 8, "nnodes": 1},
    "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "9019a1912-dirty",
                 "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": 1752867229276385,
                 "hostname": "example-hostname", "pid": 438776},
    "coll_perf": {"coll": "ReduceScatter", "coll_sn": 1231, "coll_msg_size_bytes": 2147483648,
                  "coll_exec_time_us": 41057, "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": 418.439467,
                  "coll_busbw_gbs": 366.134533,
                  "event_trace_sn": {"coll_start_sn": 1, "coll_stop_sn": 2, "kernel_events": [
                      {"channel_id": 0, "kernel_start_sn": 3, "kernel_stop_sn": 48, "kernel_record_sn": 47}]},
                  "event_trace_ts": {"coll_start_ts": 1752867229235059, "coll_stop_ts": 1752867229235064,
                                     "kernel_events": [{"channel_id": 0, "kernel_start_ts": 1752867229235181,
                                                        "kernel_stop_ts": 1752867229275811,
                                                        "kernel_record_ts": 1752867229275811}]}}}
# The README's non-verbose example (v4.0, "Output Example").
README_PLAIN = {
    "header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1},
    "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "profiler_plugin",
                 "dump_timestamp_us": 1748030377748202, "hostname": "example-hostname", "pid": 1639453},
    "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
                  "coll_exec_time_us": 61974, "coll_algobw_gbs": 277.210914, "coll_busbw_gbs": 485.119099}}
# A point-to-point record as inspector_json.cc writes it (inspectorCompletedP2p: p2p_* names, p2p_peer).
P2P = {"header": {"id": "0x11", "rank": 0, "n_ranks": 2, "nnodes": 1},
       "metadata": {"inspector_output_format_version": "v4.1", "git_rev": "", "rec_mechanism": "profiler_plugin",
                    "dump_timestamp_us": 10, "hostname": "h", "pid": 7},
       "p2p_perf": {"p2p": "Send", "p2p_sn": 3, "p2p_peer": 1, "p2p_msg_size_bytes": 1048576,
                    "p2p_exec_time_us": 100, "p2p_timing_source": "kernel_gpu", "p2p_algobw_gbs": 10.48576,
                    "p2p_busbw_gbs": 10.48576}}


def lines(*objs) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


def test_readme_records_v40(tmp_path):
    path = tmp_path / "example-hostname-pid438776.log"
    path.write_bytes(lines(README_VERBOSE, README_PLAIN))
    assert sniff_inspector(path)
    log = parse_inspector(path)
    c = log.columns
    assert log.records == 2 and log.versions == {"v4.0": 2}
    assert [log.ops[k] for k in c["op"]] == ["reduce_scatter", "all_reduce"]
    assert c["sn"].tolist() == [1231, 1407]
    assert c["msg_bytes"].tolist() == [2147483648, 17179869184]
    assert c["exec_ns"].tolist() == [41057_000, 61974_000]
    # The verbose record's kernel: its channel's start and stop, µs to ns; the plain one has none.
    assert c["start_ns"].tolist() == [1752867229235181_000, -1]
    assert c["end_ns"].tolist() == [1752867229275811_000, -1]
    assert log.no_timestamps == 1
    assert [log.processes[p] for p in c["process"]] == [("example-hostname", 438776), ("example-hostname", 1639453)]
    assert log.comms == ["0xe62dedaa97644a", "0x7f8c496ae9f661"]
    assert c["comm_rank"].tolist() == [4, 2] and c["n_ranks"].tolist() == [8, 8]
    assert c["busbw_gbps"].tolist() == [366.134533, 485.119099]
    assert (log.not_json, log.bad_shape, log.unknown_version, log.unknown_fields) == (0, 0, 0, 0)


def test_p2p_record_v41():
    log = _parse(lines(P2P))
    c = log.columns
    assert log.records == 1 and log.versions == {"v4.1": 1} and log.unknown_version == 0
    assert (c["kind"].tolist(), log.ops, c["peer"].tolist()) == ([1], ["send"], [1])


@pytest.mark.parametrize("version", ["v4.0", "v4.1", "v4.2"])
def test_every_version_from_the_writer(tmp_path, version):
    sc = synth.SCENARIOS["xrank_shared"]
    (path, *_) = write_inspector(sc, tmp_path, version=version, ranks=[2])
    log = parse_inspector(path)
    want = records(sc, 2, version)
    assert log.records == len(want) == sc.steps * len(sc.buckets)
    assert log.versions == {version: len(want)} and log.unknown_version == 0 and log.unknown_fields == 0
    # v4.2's comm_name (header) is kept; v4.0 and v4.1 have none.
    assert log.comm_names == (["default_pg"] if version == "v4.2" else [None])
    assert log.columns["start_ns"].tolist() == [r["coll_perf"]["event_trace_ts"]["kernel_events"][0]
                                                ["kernel_start_ts"] * 1000 for r in want]
    # The writer's second channel stops last: the kernel's end is that channel's stop.
    assert log.columns["end_ns"].tolist() == [r["coll_perf"]["event_trace_ts"]["kernel_events"][1]
                                              ["kernel_stop_ts"] * 1000 for r in want]


def test_gzip_and_many_processes_per_file(tmp_path):
    sc = synth.SCENARIOS["xrank_shared"]
    (path,) = write_inspector(sc, tmp_path, gz=True, one_file=True)
    assert path.name.endswith(".log.gz") and sniff_inspector(path)
    log = parse_inspector(path)
    assert log.records == sc.ranks * sc.steps * len(sc.buckets)
    assert sorted(log.processes) == [("node0", PID_BASE + r) for r in range(sc.ranks)]
    assert log.comms == [COMM_ID]
    # Every process's rank in the communicator is the rank the writer gave it.
    for p, (_, pid) in enumerate(log.processes):
        assert set(log.columns["comm_rank"][log.columns["process"] == p].tolist()) == {pid - PID_BASE}
    # Two gzip members one after the other (cat a.gz b.gz) read as one stream.
    two = tmp_path / "two.log.gz"
    two.write_bytes(gzip.compress(lines(README_PLAIN)) + gzip.compress(lines(P2P)))
    assert parse_inspector(two).records == 2


def test_hostile_lines_cost_only_themselves():
    wrong_type = json.loads(json.dumps(README_PLAIN))
    wrong_type["coll_perf"]["coll_sn"] = "1407"
    negative = json.loads(json.dumps(README_PLAIN))
    negative["coll_perf"]["coll_exec_time_us"] = -5
    rank_out = json.loads(json.dumps(README_PLAIN))
    rank_out["header"]["rank"] = 8                       # n_ranks is 8: ranks are 0..7
    newer = json.loads(json.dumps(README_PLAIN))
    newer["metadata"]["inspector_output_format_version"] = "v4.9"
    newer["coll_perf"]["coll_new_thing"] = 1
    bad_kernels = json.loads(json.dumps(README_VERBOSE))
    bad_kernels["coll_perf"]["event_trace_ts"]["kernel_events"] = {"channel_id": 0}
    data = (lines(README_PLAIN) + b"{not json\n" + lines(wrong_type, negative, rank_out, [1, 2], "text", newer,
                                                         bad_kernels, README_VERBOSE)
            + json.dumps(README_PLAIN).encode()[:57])    # the last line cut short while written
    log = _parse(data)
    # Kept: the first plain record, the newer one (its unknown field ignored) and the last verbose one.
    assert log.records == 3
    assert log.not_json == 1
    assert log.bad_shape == 6          # wrong type, negative, rank out of range, a list, a string, bad kernels
    assert (log.unknown_version, log.unknown_fields, log.unknown_names) == (1, 1, ["coll_new_thing"])
    assert log.truncated
    assert log.versions == {"v4.0": 2, "v4.9": 1}


def test_a_whole_last_line_without_its_end_is_kept():
    log = _parse(lines(README_PLAIN) + json.dumps(P2P).encode())
    assert log.records == 2 and not log.truncated


def test_what_is_not_inspector_output(tmp_path):
    sc = synth.SCENARIOS["xrank_shared"]
    (trace,) = synth.write(sc, tmp_path / "t", ranks=[0])
    report = tmp_path / "report.json"
    report.write_text('{"schema": "tracelens.report/1", "inputs": []}\n')
    debug = tmp_path / "nccl.log"
    debug.write_text("host:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
    other = tmp_path / "events.log"
    other.write_text(lines({"header": {"id": 1}, "metadata": {"version": "v4.0"}}).decode())
    quoted = tmp_path / "notes.txt"
    quoted.write_text('the key "inspector_output_format_version" names the format\n')
    garbage = tmp_path / "x.log.gz"
    garbage.write_bytes(b"\x1f\x8b" + b"\x00" * 40)
    for path in (trace, report, debug, other, quoted, garbage, tmp_path / "missing.log"):
        assert not sniff_inspector(path), path


def test_columns_are_arrays_of_one_dtype_each():
    log = _parse(lines(README_VERBOSE, P2P))
    assert all(isinstance(v, np.ndarray) and len(v) == 2 for v in log.columns.values())
    assert log.columns["busbw_gbps"].dtype == np.float64 and log.columns["sn"].dtype == np.int64


def _parse(data: bytes):
    from tracelens.parsers.nccl.inspector import parse_bytes

    return parse_bytes(data, "x.log")


# ------------------------------------------------------------------ a line too long to be a record


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
def test_a_line_past_max_line_is_skipped_and_counted_whatever_the_chunk(chunk):
    from tracelens.parsers.nccl.inspector import parse_bytes

    plain = lines(README_PLAIN)
    limit = len(plain) + 10                           # a record fits; the padded one does not
    padded = dict(README_PLAIN, pad="x" * 200)
    data = plain + lines(padded) + plain + b"y" * 500 + b"\n" + lines(P2P) + b"z" * 1000   # the last: no end
    log = parse_bytes(data, "x.log", chunk=chunk, max_line=limit)
    assert (log.records, log.too_long, log.not_json, log.bad_shape) == (3, 3, 0, 0)
    assert not log.truncated                          # the long last line is counted once, as too long
    assert log.columns["kind"].tolist() == [0, 0, 1]
    # A line of exactly the limit is read.
    exact = parse_bytes(plain.rstrip(b"\n") + b" " * 10 + b"\n", "x.log", chunk=chunk, max_line=limit)
    assert (exact.records, exact.too_long) == (1, 0)


def test_a_line_past_max_line_in_gzip():
    from tracelens.parsers.nccl.inspector import parse_bytes

    data = lines(README_PLAIN) + b"[" * 5000 + b"\n" + lines(P2P)
    log = parse_bytes(gzip.compress(data), "x.log.gz", chunk=256, max_line=4096)
    assert (log.records, log.too_long, log.not_json) == (2, 1, 0)


@pytest.mark.slow
def test_a_line_of_more_than_a_gib_is_skipped_in_little_memory(tmp_path):
    # Written in pieces, read in a child process whose peak memory is its own: VmHWM, its address space's
    # high-water mark, not ru_maxrss, which keeps the forking test process's across the exec.
    import subprocess
    import sys

    path = tmp_path / "huge.log"
    piece = b"x" * (1 << 24)
    with open(path, "wb") as fh:
        fh.write(lines(README_PLAIN) + json.dumps(README_PLAIN).encode()[:-1] + b',"pad":"')
        for _ in range(65):                             # 65 x 16 MiB: past 1 GiB
            fh.write(piece)
        fh.write(b'"}\n' + lines(P2P))
    assert path.stat().st_size > 1 << 30
    code = ("import sys; from tracelens.parsers.nccl import parse_inspector; "
            "log = parse_inspector(sys.argv[1]); "
            "hwm = next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')); "
            "print(log.records, log.too_long, log.not_json, hwm)")
    got = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                         timeout=300)
    records, too_long, not_json, peak_kib = map(int, got.stdout.split())
    assert (records, too_long, not_json) == (2, 1, 0)
    assert peak_kib < 400 << 10                       # the line is never held: far below its 1 GiB


# ------------------------------------------------------------------ valid JSON, impossible values


def _with(base: dict, path: str, value) -> dict:
    rec = json.loads(json.dumps(base))
    *where, key = path.split(".")
    at = rec
    for k in where:
        at = at[k][0] if k == "kernel_events" else at[k]
    at[key] = value
    return rec


@pytest.mark.parametrize("base, path, value", [
    (README_PLAIN, "coll_perf.coll_msg_size_bytes", -1),                      # negative size
    (README_PLAIN, "coll_perf.coll_exec_time_us", -41),                       # negative time
    (README_PLAIN, "coll_perf.coll_exec_time_us", 2**62),                     # past int64 once in ns
    (README_PLAIN, "coll_perf.coll_msg_size_bytes", 2**62),                   # past int64 times the 8 ranks
    (README_PLAIN, "coll_perf.coll_sn", 2**64),                               # past int64
    (README_PLAIN, "coll_perf.coll_sn", "1407"),                              # a string where an int goes
    (README_PLAIN, "coll_perf.coll_sn", True),                                # a bool
    (README_PLAIN, "coll_perf.coll_sn", 1407.0),                              # a float
    (README_PLAIN, "header.rank", 8),                                         # rank >= n_ranks
    (README_PLAIN, "header.n_ranks", 0),
    (README_PLAIN, "header.nnodes", 9),                                       # more nodes than ranks
    (README_PLAIN, "metadata.pid", -3),
    (README_PLAIN, "coll_perf.coll_busbw_gbs", -2.5),
    (README_PLAIN, "coll_perf.coll_algobw_gbs", "fast"),
    (README_VERBOSE, "coll_perf.event_trace_ts.kernel_events.kernel_start_ts", 2**60),   # overflows x1000
    (README_VERBOSE, "coll_perf.event_trace_ts.kernel_events.kernel_stop_ts", -1),
    (README_VERBOSE, "coll_perf.coll_exec_time_us", 0),                       # no time, a 40 ms kernel
    (P2P, "p2p_perf.p2p_peer", 2),                                            # n_ranks is 2
])
def test_an_impossible_value_costs_only_its_record(base, path, value):
    log = _parse(lines(README_PLAIN, _with(base, path, value), P2P))
    assert (log.records, log.bad_shape, log.not_json) == (2, 1, 0), (path, value)
    assert all(v.dtype in (np.int64, np.float64) for v in log.columns.values())


def test_infinite_and_nan_bandwidths_are_not_json_or_bad():
    # 1e400 is out of every float's range (the decoder refuses it); NaN and Infinity are not JSON.
    text = json.dumps(README_PLAIN)
    data = b"".join((text.replace('"coll_busbw_gbs": 485.119099', f'"coll_busbw_gbs": {v}') + "\n").encode()
                    for v in ("1e400", "NaN", "Infinity", "-Infinity"))
    log = _parse(lines(README_PLAIN) + data)
    assert (log.records, log.not_json + log.bad_shape) == (1, 4)
    assert np.isfinite(log.columns["busbw_gbps"]).all()


def test_a_zero_exec_time_with_a_kernel_under_2_us_is_a_record():
    # Both kernel ends are floored to a µs: a kernel of 1 µs may have an exec time of 0.
    rec = _with(README_VERBOSE, "coll_perf.coll_exec_time_us", 0)
    kernel = rec["coll_perf"]["event_trace_ts"]["kernel_events"][0]
    kernel["kernel_stop_ts"] = kernel["kernel_start_ts"] + 1
    assert _parse(lines(rec)).records == 1


def test_nesting_past_the_decoder_depth_is_not_json():
    deep = b'{"header":' * 20000 + b"1" + b"}" * 20000
    log = _parse(lines(README_PLAIN) + deep + b"\n" + b"[" * 100000 + b"\n" + lines(P2P) + b"[" * 50000)
    assert (log.records, log.not_json, log.truncated) == (2, 2, True)


def test_a_communicator_of_more_than_2_to_the_20_ranks_is_left_out_and_counted():
    from tracelens.model.meta import MAX_WORLD

    huge = _with(_with(README_PLAIN, "header.n_ranks", MAX_WORLD + 1), "header.rank", MAX_WORLD)
    edge = _with(_with(README_PLAIN, "header.n_ranks", MAX_WORLD), "header.rank", 3)
    log = _parse(lines(README_PLAIN, huge, edge))
    assert (log.records, log.implausible_world, log.bad_shape) == (2, 1, 0)


def test_kernel_times_more_than_a_day_from_the_log_s_are_left_out_and_counted():
    day_us = 24 * 3600 * 10**6
    ok = [README_VERBOSE] * 3
    jump = _with(_with(README_VERBOSE, "coll_perf.event_trace_ts.kernel_events.kernel_start_ts",
                       1752867229235181 + day_us + 10), "coll_perf.event_trace_ts.kernel_events.kernel_stop_ts",
                 1752867229275811 + day_us + 10)
    early = _with(README_VERBOSE, "coll_perf.event_trace_ts.kernel_events.kernel_start_ts", 5)
    log = _parse(lines(*ok, jump, early, README_PLAIN))
    assert (log.records, log.far_times) == (4, 2)                   # three verbose, one without times
    assert set(log.columns["start_ns"].tolist()) == {1752867229235181000, -1}
    # Within a day: kept.
    near = _with(_with(README_VERBOSE, "coll_perf.event_trace_ts.kernel_events.kernel_start_ts",
                       1752867229235181 + day_us - 10**6), "coll_perf.event_trace_ts.kernel_events.kernel_stop_ts",
                 1752867229275811 + day_us - 10**6)
    assert (_parse(lines(*ok, near)).far_times, _parse(lines(*ok, near)).records) == (0, 4)
