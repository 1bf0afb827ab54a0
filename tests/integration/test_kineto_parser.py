"""Kineto parsing across eras, built from small hand-written traces and real corpus files."""

import gzip

import numpy as np
import pytest

import tracelens
from tracelens.errors import InputError, UsageError

from conftest import corpus_file, host, kernel, write_trace


def test_relative_float_timestamps_are_exact_nanoseconds(tmp_path):
    # ts 4458677009853.422 µs relative to base 1711964646000000000 ns (the nccl_parser_config layout):
    # start = base + 4458677009853422 ns exactly, dur 2636.669 µs = 2636669 ns.
    ev = [kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 4458677009853.422, 2636.669, stream=40)]
    t = tracelens.load(str(write_trace(tmp_path / "r.json", ev, baseTimeNanoseconds=1711964646000000000)))[0]
    row = {c: v[0] for c, v in t.device_ops.items()}
    assert row["start_ns"] == 1711964646000000000 + 4458677009853422
    assert row["end_ns"] - row["start_ns"] == 2636669
    assert row["kind"] == "comm" and row["comm_kind"] == "nccl"


def test_absolute_float_timestamps_keep_their_decimals():
    # The raw text of this 2024 nightly's first kernel reads "ts": 1712195495505582.988 (checked with zcat|grep);
    # a float64 cannot hold it, the Decimal re-read does.
    t = tracelens.load(str(corpus_file("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")))[0]
    assert t.device_ops["start_ns"].min() == 1712195495505582988


def test_pytorch_1_9_legacy_categories_and_string_tids():
    # worker0 2021 trace: cats Kernel/Runtime/Operator, tids "stream 7", ProfilerStep#5-#10 (corpus.md).
    t = tracelens.load(str(corpus_file(
        "kineto_misc/kineto_tb_plugin_resnet50_2021/worker0.1623143089861.pt.trace.json.gz")))[0]
    assert t.steps["step"].tolist() == [5, 6, 7, 8, 9, 10]
    assert (t.device_ops["kind"] == "compute").sum() == 8772
    assert 7 in set(t.device_ops["stream"])
    assert (t.device_ops["launch_idx"] >= 0).mean() > 0.99  # "external id"/correlation links still resolve
    assert t.meta.rank_rule == "file name"  # worker0 in the file name, no distributedInfo


def test_rank_sources(tmp_path):
    ev = [kernel("k", 10, 5)]
    a = write_trace(tmp_path / "a.json", ev, distributedInfo={"rank": 3, "world_size": 4, "backend": "nccl"})
    b = write_trace(tmp_path / "trace-rank-1.json", ev)
    c = write_trace(tmp_path / "anonymous.json", ev)
    traces = tracelens.load(str(tmp_path))
    by_source = {t.meta.source: t.meta for t in traces}
    assert (by_source[str(a)].rank, by_source[str(a)].rank_rule) == (3, "distributedInfo")
    assert (by_source[str(b)].rank, by_source[str(b)].rank_rule) == (1, "file name")
    assert (by_source[str(c)].rank, by_source[str(c)].rank_rule) == (0, "order")
    assert "rank-unknown" in by_source[str(c)].warnings.codes()


def test_rank_from_minified_json_and_string_world_size(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"distributedInfo":{"rank":5,"world_size":"8"},"traceEvents":[{"ph":"X","cat":"kernel",'
                    '"name":"k","pid":0,"tid":7,"ts":1,"dur":1,"args":{"stream":7,"device":0}}]}')
    meta = tracelens.load(str(path))[0].meta
    assert (meta.rank, meta.world_size) == (5, 8)


def test_comm_linkage_and_user_patterns(tmp_path):
    ev = [
        host("record_param_comms", 100, 50), host("cudaLaunchKernel", 110, 5, cat="cuda_runtime", correlation=1),
        kernel("my_custom_allgather_kernel", 200, 30, stream=20, corr=1),
        host("aten::mm", 300, 20), host("cudaLaunchKernel", 305, 5, cat="cuda_runtime", correlation=2),
        kernel("sm90_xmma_gemm", 400, 40, corr=2),
        kernel("fancy_p2p_copy", 500, 10, stream=21),
    ]
    path = write_trace(tmp_path / "r.json", ev)
    t = tracelens.load(str(path))[0]
    kinds = dict(zip(t.device_ops["name"], zip(t.device_ops["kind"], t.device_ops["rule"])))
    assert kinds["my_custom_allgather_kernel"] == ("comm", "comm-scope")
    assert kinds["sm90_xmma_gemm"][0] == "compute" and kinds["fancy_p2p_copy"][0] == "compute"
    t2 = tracelens.load(str(path), comm_patterns=("p2p_copy",))[0]
    assert dict(zip(t2.device_ops["name"], t2.device_ops["rule"]))["fancy_p2p_copy"] == "user-pattern"


def test_memcpy_memset_sync_are_never_compute(tmp_path):
    ev = [kernel("Memcpy HtoD (Pageable -> Device)", 0, 10, cat="gpu_memcpy"),
          kernel("Memset (Device)", 20, 10, cat="gpu_memset"),
          kernel("Stream Sync", 40, 10, cat="cuda_sync"),
          kernel("Memcpy PtoP (Device -> Device)", 60, 10, cat="gpu_memcpy"),
          kernel("gemm", 80, 10)]
    rep = tracelens.analyze(tracelens.load(str(write_trace(tmp_path / "r.json", ev))))
    r = rep.ranks[0].steps[0]
    # Window [0, 90) µs (no steps): compute = gemm 10 µs; comm = the PtoP copy 10 µs (ce-copy);
    # busy = 40 µs (sync excluded) -> idle 50 µs.
    assert (r.duration_ns, r.compute_ns, r.comm_ns, r.idle_ns) == (90_000, 10_000, 10_000, 50_000)


def test_step_windows_never_overlap_and_extend_to_launched_work(tmp_path):
    # Step 1 host span [0, 100) launches a kernel running [150, 250); step 2's span starts at 120 (CPU ahead).
    # Window 1 = [0, 250); window 2 = [max(120, 250), max(300, 320)) = [250, 320) (hand calculation).
    ev = [host("ProfilerStep#1", 0, 100, cat="user_annotation"),
          host("cudaLaunchKernel", 10, 5, cat="cuda_runtime", correlation=1), kernel("a", 150, 100, corr=1),
          host("ProfilerStep#2", 120, 180, cat="user_annotation"),
          host("cudaLaunchKernel", 130, 5, cat="cuda_runtime", correlation=2), kernel("b", 260, 60, corr=2)]
    rep = tracelens.analyze(tracelens.load(str(write_trace(tmp_path / "r.json", ev))))
    s1, s2 = rep.ranks[0].steps
    assert (s1.start_ns, s1.end_ns, s2.start_ns, s2.end_ns) == (0, 250_000, 250_000, 320_000)
    assert (s1.compute_ns, s2.compute_ns) == (100_000, 60_000)


def test_incomplete_last_step_is_flagged(tmp_path):
    ev = [host("ProfilerStep#7", 0, 100, cat="user_annotation"),
          host("cudaLaunchKernel", 10, 5, cat="cuda_runtime", correlation=1), kernel("a", 20, 30, corr=1),
          host("cudaLaunchKernel", 60, 5, cat="cuda_runtime", correlation=2)]  # its kernel was never recorded
    rep = tracelens.analyze(tracelens.load(str(write_trace(tmp_path / "r.json", ev))))
    assert rep.ranks[0].steps[0].complete is False
    assert [w.code for w in rep.warnings if w.code != "rank-unknown"] == ["incomplete-step"]


def test_negative_durations_and_same_stream_overruns_are_counted(tmp_path):
    ev = [kernel("a", 0, 50), kernel("b", 40, 20), kernel("c", 100, -5)]
    t = tracelens.load(str(write_trace(tmp_path / "r.json", ev)))[0]
    codes = {w.code: w.count for w in t.meta.warnings}
    assert codes["negative-duration"] == 1 and codes["same-stream-overlap"] == 1
    ends = dict(zip(t.device_ops["name"], t.device_ops["end_ns"]))
    assert ends["a"] == 40_000 and ends["c"] == 100_000  # a clipped at b's start; c clamped to zero length


@pytest.mark.parametrize("content, problem", [
    (b"\x1f\x8b\x08\x00" + b"\x00" * 10, "truncated or corrupt gzip"),
    (b"{\"traceEvents\": [", "not valid JSON"),
    (b"{\"hello\": 1}", "no 'traceEvents' list"),
    (b"{\"traceEvents\": []}", "has no events"),
    (b"", "empty file"),
])
def test_bad_input_is_one_clear_error(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        tracelens.load(str(path))
    assert problem in str(err.value) and str(path) in str(err.value)
    assert err.value.exit_code == 3


def test_truncated_real_gzip(tmp_path):
    data = gzip.compress(b'{"traceEvents": [' + b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1},' * 200 + b"{}]}")
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated or corrupt gzip"):
        tracelens.load(str(path))


def test_wrong_field_types_are_skipped_and_counted(tmp_path):
    ev = [kernel("good", 0, 10), {"ph": "X", "cat": "kernel", "name": "bad", "ts": "soon", "dur": [1]}]
    t = tracelens.load(str(write_trace(tmp_path / "r.json", ev)))[0]
    assert t.device_ops["name"].tolist() == ["good"]
    assert {w.code: w.count for w in t.meta.warnings}["malformed-events"] == 1


def test_missing_paths_are_usage_errors(tmp_path):
    with pytest.raises(UsageError):
        tracelens.load(str(tmp_path / "nope.json"))
    with pytest.raises(UsageError, match="no trace files found"):
        tracelens.load(str(tmp_path))


def test_per_stream_frames():
    t = tracelens.load(str(corpus_file("hta/df_index_resolver/df_index_resolver.json.gz")))[0]
    lanes = t.streams()
    assert set(lanes) >= {(1, 7), (1, 14)}
    nccl = lanes[(1, 14)]
    assert (nccl["kind"] == "comm").all() and len(nccl) == 2020
    assert (np.diff(nccl["start_ns"]) >= 0).all()


def _mi300_like(bytes_value):
    """A DDP step shaped like the public MI300 ResNet trace: a memcpy call whose ``args.bytes`` may be text,
    and an all-reduce whose size is only in its ``nccl:all_reduce`` annotation (``Input Dims``/``Input type``)."""
    return [host("ProfilerStep#15", 0, 1000, cat="user_annotation"),
            host("hipMemcpyAsync", 10, 5, cat="cuda_runtime", correlation=1, bytes=bytes_value),
            kernel("Memcpy HtoD", 20, 5, corr=1, cat="gpu_memcpy"),
            host("nccl:all_reduce", 100, 50, **{"Input Dims": [[1024, 4]], "Input type": ["float"]}),
            host("hipExtLaunchKernel", 110, 5, cat="cuda_runtime", correlation=2),
            kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 200, 300, stream=20, corr=2),
            host("aten::mm", 160, 20, **{"Input Dims": [[64, 64], [64, 64]]})]


def test_one_text_number_costs_nothing_and_is_counted(tmp_path):
    # Before, "bytes": "128" sent the whole file down a lenient path that dropped every event with
    # "Input Dims" (the annotation that sizes the all-reduce): 1024 x 4 float32 = 16,384 bytes, by hand.
    clean = tracelens.load(str(write_trace(tmp_path / "clean.json", _mi300_like(128))), jobs=0)[0]
    t = tracelens.load(str(write_trace(tmp_path / "text.json", _mi300_like("128"))), jobs=0)[0]
    assert t.host_ops["name"].tolist() == clean.host_ops["name"].tolist()
    assert len(t.host_ops) == 5
    assert t.collectives["bytes"].tolist() == [16_384]
    warned = {w.code: w for w in t.meta.warnings}
    assert "malformed-events" not in warned
    assert warned["coerced-values"].count == 1
    assert "args.bytes (1, first traceEvents[1])" in warned["coerced-values"].message


def test_text_times_and_float_ids_are_read_and_counted(tmp_path):
    # ts "100.5" µs -> 100,500 ns; a correlation written 2.0 still links the kernel to its launch.
    ev = [host("cudaLaunchKernel", "100.5", 5, cat="cuda_runtime", correlation=2.0),
          kernel("gemm", 200, "30", corr=2)]
    t = tracelens.load(str(write_trace(tmp_path / "r.json", ev)), jobs=0)[0]
    assert t.host_ops["start_ns"].tolist() == [100_500]
    assert t.device_ops["end_ns"].tolist() == [230_000]
    assert t.device_ops["launch_idx"].tolist() == [0]
    w = {w.code: w for w in t.meta.warnings}["coerced-values"]
    assert w.count == 3
    assert "ts (1, first traceEvents[0])" in w.message and "args.correlation (1, first traceEvents[0])" in w.message
    assert "dur (1, first traceEvents[1])" in w.message


def test_unreadable_events_are_skipped_alone_with_field_and_index(tmp_path):
    # A missing or null time is skipped, never read as 0 (which put the event at the epoch); a list as
    # "ph" or an event that is not an object is skipped too; everything else is read.
    ev = _mi300_like(128) + [kernel("no_time", None, 10), {"ph": ["X"], "name": "odd"}, 7,
                             {"ph": "X", "cat": "kernel", "name": "no_dur", "ts": 5}, kernel("late", "soon", 1)]
    t = tracelens.load(str(write_trace(tmp_path / "r.json", ev)), jobs=0)[0]
    assert len(t.host_ops) == 5 and t.collectives["bytes"].tolist() == [16_384]
    assert sorted(t.device_ops["name"].tolist()) == ["Memcpy HtoD",
                                                     "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"]
    assert t.device_ops["start_ns"].min() == 20_000
    w = {w.code: w for w in t.meta.warnings}["malformed-events"]
    assert w.count == 5
    for part in ("ts (2, first traceEvents[7])", "ph (1, first traceEvents[8])",
                 "event (not an object) (1, first traceEvents[9])", "dur (1, first traceEvents[10])"):
        assert part in w.message


def test_absolute_float_times_stay_exact_beside_a_bad_event(tmp_path):
    # The 2024 absolute-float layout (ns_resolution_trace): the digits of 1712195495505582.988 µs must survive
    # even when another event is malformed and the file is read event by event. (A float64 reads it as
    # ...583.0; the second time's .25 is what shows that the file's floats carry decimals.)
    path = tmp_path / "r.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
                    '"ts": 1712195495505582.988, "dur": 2.5, "args": {"device": 0, "stream": 7, "bytes": "64"}}, '
                    '{"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, '
                    '"ts": 1712195495505600.25, "dur": 1.25, "args": {"device": 0, "stream": 7}}, '
                    '{"ph": "X", "cat": "kernel", "name": "bad", "ts": [1], "dur": 1}]}')
    t = tracelens.load(str(path), jobs=0)[0]
    assert t.device_ops["start_ns"].tolist() == [1712195495505582988, 1712195495505600250]
    assert t.device_ops["end_ns"].tolist() == [1712195495505585488, 1712195495505601500]
    assert "timestamps-rounded" not in t.meta.warnings.codes()


def test_a_bad_document_field_costs_only_itself(tmp_path):
    # deviceProperties as an object used to make the whole header unreadable, rank 3 included.
    t = tracelens.load(str(write_trace(tmp_path / "r.json", [kernel("k", 10, 5)],
                                       distributedInfo={"rank": 3.0, "world_size": "8"},
                                       deviceProperties={"name": "MI300X"})), jobs=0)[0]
    assert (t.meta.rank, t.meta.rank_rule, t.meta.world_size) == (3, "distributedInfo", 8)
    w = {w.code: w for w in t.meta.warnings}
    # Document fields are no events: what was read and what was ignored, in their own warning.
    assert "deviceProperties" in w["malformed-header"].message and "coerced-values" not in w
    assert "distributedInfo.rank read as a number" in w["malformed-header"].message


def test_numbers_no_column_can_hold_skip_their_event(tmp_path):
    # bytes 10^29 overflowed int64 in the column build (a traceback); 1e400 is beyond float range; a ts of
    # 1e17 µs is 10^20 ns, beyond int64. Each is skipped alone; k3 is read as usual (ts 2 µs = 2,000 ns).
    path = tmp_path / "r.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, '
                    '"args": {"bytes": 123456789012345678901234567890}}, '
                    '{"ph": "X", "cat": "kernel", "name": "k2", "ts": 1e400, "dur": 1}, '
                    '{"ph": "X", "cat": "kernel", "name": "k3", "ts": 2, "dur": 1}, '
                    '{"ph": "X", "cat": "kernel", "name": "k4", "ts": 1e17, "dur": 1}]}')
    t = tracelens.load(str(path), jobs=0)[0]
    assert t.device_ops["name"].tolist() == ["k3"] and t.device_ops["start_ns"].tolist() == [2_000]
    w = {w.code: w for w in t.meta.warnings}["malformed-events"]
    assert w.count == 3
    assert "args.bytes (1, first traceEvents[0])" in w.message and "ts (2, first traceEvents[1])" in w.message
