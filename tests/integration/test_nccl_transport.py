"""The network transport verdict on the 15 real NCCL logs of the corpus, and on generated logs for the
version-dependent cases of ../shared/reference/nccl-transport.md §8.

Expected verdicts: corpus/nccl_logs/SOURCE.md and reference/nccl-transport.md §7 (what each log's issue
supports); the evidence line numbers are the files' own (``cat -n``), chosen as docs/metrics.md ("Network
transport") says: the deciding lines, the first of each host first.
"""

from __future__ import annotations

import pytest

from tracelens import api
from tracelens.analyzers import Thresholds
from tracelens.analyzers.run import transport
from tracelens.analyzers.wording import diagnosis
from tracelens.model.nccl_records import EnvSetting
from tracelens.parsers.nccl import debug_log as nccl_log

from conftest import corpus_file

LOGS = "nccl_logs/"

# file -> (verdict, severity, evidence line numbers, multi_node)
CORPUS_VERDICTS = {
    # One RoCE "Using" line: RDMA set up, no connection line to confirm it.
    "issue_areal639_expected_ib.log": ("rdma_init_only", "info", [1], None),
    # Sockets initialised, nothing says the job spans nodes or that RDMA was expected (alone; see below).
    "issue_areal639_socket_fallback.log": ("inconclusive", "info", [1], None),
    # 2.4 plugin era: network connections over the EFA plugin without /GDRDMA (lines 2-3), three hosts.
    "issue_awsofi24_via_NET_AWS_Libfabric_old.log": ("rdma_host_staged", "info", [2, 3], True),
    # 2.3.7: "Using network Socket" (line 9) and no IB device (line 8), one host of a 4-rank job.
    "issue_horovod685_nccl2.3.7_using_network_socket.log": ("inconclusive", "info", [9, 8], None),
    # Two hosts, every channel via NET/Socket: line 1 (agzen-master) and line 5 (agzen-worker).
    "issue_nccl-tests284_two_nodes_via_NET_Socket.log": ("tcp_no_rdma", "warning", [1, 5], True),
    # <= 2.4.6 behaviour: processes print a socket line and an IB line (lines 1, 9 and 11).
    "issue_nccl-tests29_mixed_socket_and_ib.log": ("inconclusive", "info", [1, 9, 11], True),
    # NCCL_IB_DISABLE=1 echoed (line 3): "Using network Socket" (7) over lo (6), one host.
    "issue_nccl1053_ib_disabled_using_network_socket.log": ("tcp_deliberate", "info", [7, 6, 3], False),
    # via NET/IB/n/GDRDMA between two H20 hosts.
    "issue_nccl1189_ib_gdrdma_and_p2p_cumem_h20.log": ("rdma_gdr", "info", [1, 2], True),
    # Plugin not found is neutral; no line names a transport.
    "issue_nccl1232_plugin_not_found_internal.log": ("inconclusive", "info", [], None),
    # via NET/IB/3 without /GDRDMA.
    "issue_nccl1412_ib_and_p2p_direct_pointer.log": ("rdma_host_staged", "info", [2, 3], True),
    # EFA through libfabric: "Using network Libfabric" (5), provider efa (6), two hosts.
    "issue_nccl1597_efa_libfabric.log": ("rdma_init_only", "info", [5, 6], True),
    # External IB plugin, no GDR suffix in the excerpt.
    "issue_nccl1814_ibext_v8_net.log": ("rdma_host_staged", "info", [1, 2], True),
    # Old ring format via NET/Socket on sh-01 (line 3) and sh-03 (line 4).
    "issue_nccl278_old_ring_format_socket_nccl2.5.6.log": ("tcp_no_rdma", "warning", [3, 4], True),
    # Sockets on lo only: one host; the socket choice is harmless.
    "issue_nccl352_ib_nodevice_socket_lo_nccl2.4.8.log": ("intra_node_only", "info", [4], False),
    # Inter-node via NET/Socket/3 (lines 8-9) beside intra-node P2P/IPC; no RDMA line in the excerpt.
    "issue_nccl952_ib_nodevice_p2pipc_plus_socket.log": ("tcp_no_rdma", "warning", [8, 9], True),
}


def verdict(*logs, env=(), rows=()):
    return transport.analyze(list(logs), list(env), list(rows), Thresholds())


def corpus_log(name):
    return nccl_log.parse(corpus_file(LOGS + name))


@pytest.mark.parametrize("name", sorted(CORPUS_VERDICTS))
def test_every_corpus_log_gets_its_verdict_and_cites_its_lines(name):
    want, severity, lines, multi = CORPUS_VERDICTS[name]
    path = str(corpus_file(LOGS + name))
    net, found = verdict(corpus_log(name))
    assert (net.verdict, net.severity, net.multi_node) == (want, severity, multi)
    assert [(e.file, e.line) for e in net.evidence] == [(path, n) for n in lines]
    text = corpus_file(LOGS + name).read_text().splitlines()
    assert [e.text for e in net.evidence] == [text[n - 1].strip() for n in lines]
    d = diagnosis(found)
    assert (d.id, d.severity, d.step) == ("nccl-transport", severity, None)
    for n in lines:   # the detail quotes each deciding line by file name and number
        assert f"{name}:{n} " in d.detail


def test_the_corpus_communicators_say_what_the_lines_say():
    net, _ = verdict(corpus_log("issue_nccl1189_ib_gdrdma_and_p2p_cumem_h20.log"))
    (c,) = net.communicators
    # 9 NET/IB/n/GDRDMA lines and 5 P2P/CUMEM lines in the file; ranks printing them: 2 (line 1, receive),
    # 3 (lines 2-10), 1 (lines 11-14).
    assert (c.id, c.net, c.gdr, c.connections) == ("all", "IB", True, {"NET/IB": 9, "P2P/CUMEM": 5})
    assert (c.ranks, c.hosts, c.verdict) == ([1, 2, 3], ["H20-GPU-05", "H20-GPU-06"], "rdma_gdr")
    net, found = verdict(corpus_log("issue_awsofi24_via_NET_AWS_Libfabric_old.log"))
    assert net.communicators[0].net == "AWS Libfabric" and found.rank == 7      # line 2: rank 7 sends
    net, _ = verdict(corpus_log("issue_horovod685_nccl2.3.7_using_network_socket.log"))
    assert net.nccl_version == "2.3.7"
    net, found = verdict(corpus_log("issue_nccl1053_ib_disabled_using_network_socket.log"))
    assert net.env == {"NCCL_IBEXT_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo"}
    assert diagnosis(found).title == "network transport: TCP sockets, chosen deliberately"
    assert "TCP was forced by NCCL_IB_DISABLE=1" in diagnosis(found).detail


def test_the_areal_pair_is_a_silent_fallback():
    # The failing run's socket line next to the healthy run's RoCE line: an RDMA device was listed, and the
    # socket transport (only set up when IB and the plugin failed, >= 2.4.8) was chosen.
    net, found = verdict(corpus_log("issue_areal639_socket_fallback.log"), corpus_log("issue_areal639_expected_ib.log"))
    assert (net.verdict, net.severity) == ("tcp_silent_fallback", "critical")
    assert [e.text for e in net.evidence] == ["NCCL INFO NET/Socket : Using [0]bond0:200.8.184.2<0>",
                                              "NCCL INFO NET/IB : Using [0]mlx5_bond:1/RoCE ..."]
    assert "ibv_devinfo" in diagnosis(found).advice and "/dev/infiniband" in diagnosis(found).advice


def test_the_socket_line_alone_is_a_fallback_once_rdma_was_asked_for():
    # The fix of the issue set NCCL_IB_HCA=mlx5_bond: with it recorded, the socket line is a silent fallback.
    env = [EnvSetting("manifest.json", "NCCL_IB_HCA", "mlx5_bond")]
    net, found = verdict(corpus_log("issue_areal639_socket_fallback.log"), env=env)
    assert net.verdict == "tcp_silent_fallback"
    assert net.evidence[-1].file == "manifest.json" and net.evidence[-1].text == "NCCL_IB_HCA=mlx5_bond"
    assert 'manifest.json "NCCL_IB_HCA=mlx5_bond"' in diagnosis(found).detail


def test_horovod_on_two_nodes_is_tcp_without_rdma():
    # The launcher's WORLD_SIZE 8 > LOCAL_WORLD_SIZE 4: the job spans nodes, "Using network Socket" is TCP.
    env = [EnvSetting("rank0.sqlite", "WORLD_SIZE", "8"), EnvSetting("rank0.sqlite", "LOCAL_WORLD_SIZE", "4")]
    net, _ = verdict(corpus_log("issue_horovod685_nccl2.3.7_using_network_socket.log"), env=env)
    assert (net.verdict, net.multi_node) == ("tcp_no_rdma", True)
    assert [e.line for e in net.evidence] == [9, 8]       # Using network Socket; devices() returned 0 devices


def test_ib_no_device_found_alone_does_not_make_a_fallback(tmp_path):
    # Issue 952's own title line, added to its excerpt: "No device found" is printed on every Ethernet-only
    # node with rdma-core installed, so it is cited but stays tcp_no_rdma (docs/metrics.md).
    log = tmp_path / "952.log"
    log.write_text(corpus_file(LOGS + "issue_nccl952_ib_nodevice_p2pipc_plus_socket.log").read_text()
                   + "<cluster_name>:926:1151 [7] NCCL INFO NET/IB : No device found.\n")
    net, found = verdict(nccl_log.parse(log))
    assert net.verdict == "tcp_no_rdma" and [e.line for e in net.evidence] == [8, 9, 17]
    assert "/dev/infiniband" in diagnosis(found).advice


def test_logs_alone_through_the_api():
    rep = api.report([str(corpus_file(LOGS + "issue_nccl278_old_ring_format_socket_nccl2.5.6.log"))])
    assert rep.ranks == [] and rep.summary.ranks == 0
    assert rep.transport.verdict == "tcp_no_rdma" and rep.transport.logs == 1
    assert [(d.id, d.rank) for d in rep.diagnoses] == [("nccl-transport", 3)]      # line 3: rank 3 sends
    assert [(i.format, i.rank) for i in rep.inputs] == [("nccl-log", -1)]


@pytest.mark.parametrize("name", sorted(CORPUS_VERDICTS))
def test_the_verdict_of_logs_alone_is_their_transport(name):
    # NCCL logs without a trace have no overlap to judge: the run's answer is the transport finding, by its
    # own title, and never the no-communication sentence of a trace with nothing to overlap.
    rep = api.report([str(corpus_file(LOGS + name))])
    (d,) = [d for d in rep.diagnoses if d.id == "nccl-transport"]
    assert rep.verdict.headline.startswith(d.title[0].upper() + d.title[1:] + " (NCCL logs alone")
    assert rep.verdict.causes == [] and "nothing to overlap" not in rep.verdict.headline


def test_the_text_of_logs_alone_opens_with_their_transport():
    # The log of NCCL issue 1189 connects two H20 hosts via NET/IB/n/GDRDMA (CORPUS_VERDICTS: rdma_gdr).
    from tracelens.renderers import render

    rep = api.report([str(corpus_file(LOGS + "issue_nccl1189_ib_gdrdma_and_p2p_cumem_h20.log"))])
    first = render(rep, "text", color=False, width=160).splitlines()[0]
    assert first.startswith("verdict: Network transport: RDMA (IB) with GPUDirect RDMA (NCCL logs alone"), first


# ------------------------------------------------------------------------------------- generated logs (§8)

def gen(tmp_path, name, *lines):
    """A log of ``lines``, each "host:pid message" turned into NCCL's prefix (tid = pid + 1, device 0)."""
    out = []
    for line in lines:
        who, msg = line.split(" ", 1)
        host, pid = who.split(":")
        out.append(f"{host}:{pid}:{int(pid) + 1} [0] NCCL INFO {msg}")
    path = tmp_path / name
    path.write_text("\n".join(out) + "\n")
    return nccl_log.parse(path)


def comm(host_pid, rank, nranks=16, nnodes=2, ptr="0x5581", cid="0x9f3a", local=8):
    return [f"{host_pid} ncclCommInitRankConfig comm {ptr} rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 "
            f"busId 18000 commId {cid} - Init START",
            f"{host_pid} comm {ptr} rank {rank} nRanks {nranks} nNodes {nnodes} localRanks {local} localRank 0 MNNVL 0"]


FALLBACK_227 = ["h1:100 NCCL version 2.27.3+cuda12.9", "h1:100 NET/Plugin: Could not find: libnccl-net.so.",
                "h1:100 NET/IB : No device found.", "h1:100 Failed to initialize NET plugin IB",
                "h1:100 NET/Socket : Using [0]eth0:10.0.0.1<0>", "h1:100 Initialized NET plugin Socket",
                *comm("h1:100", 0), "h1:100 Assigned NET plugin Socket to comm", "h1:100 Using network Socket"]


def test_227_ib_plugin_failing_then_socket_assigned(tmp_path):
    # NCCL 2.27+ states the fallback itself: IB failed to initialise (line 4), Socket assigned (line 9).
    # With nothing saying RDMA was expected (no HCA, no IB variable), "No device found" is what every
    # Ethernet-only node prints: TCP without RDMA, a warning on a 2-node communicator.
    net, _ = verdict(gen(tmp_path, "h1.100.log", *FALLBACK_227))
    assert (net.verdict, net.multi_node, net.nccl_version) == ("tcp_no_rdma", True, "2.27.3")
    (c,) = net.communicators
    assert (c.id, c.ranks, c.n_nodes, c.net, c.plugin) == ("0x9f3a", [0], 2, "Socket", "Socket")
    assert [e.line for e in net.evidence] == [10, 9, 4]     # Using network Socket, Assigned Socket, IB failed
    # The same log on a cluster where NCCL_IB_HCA was set: RDMA was expected, the fallback is silent.
    env = [EnvSetting("run/manifest.json", "NCCL_IB_HCA", "mlx5_0")]
    net, found = verdict(gen(tmp_path, "h1.100.log", *FALLBACK_227), env=env)
    assert (net.verdict, net.severity, found.severity) == ("tcp_silent_fallback", "critical", "critical")
    assert net.env["NCCL_IB_HCA"] == "mlx5_0" and net.evidence[2].text == "NCCL_IB_HCA=mlx5_0"


def test_230_verbs_wording_and_ipoib_bootstrap(tmp_path):
    # 2.30 prints "Count not open <lib>" (NCCL's typo): RDMA was tried; the bootstrap runs over ib0 (IPoIB).
    log = gen(tmp_path, "h1.7.log", "h1:7 NCCL version 2.30.1+cuda13.0", "h1:7 Count not open libibverbs.so.1",
              "h1:7 Bootstrap: Using ib0:10.9.0.1<0>", *comm("h1:7", 0), "h1:7 Using network Socket")
    net, _ = verdict(log)
    assert net.verdict == "tcp_silent_fallback"
    assert [e.line for e in net.evidence] == [6, 2, 3]     # Using network Socket; the verbs line; ib0


def test_a_plugin_that_fails_to_load(tmp_path):
    # NCCL_NET_PLUGIN names a plugin that is not there: sockets on a 2-node job are a silent fallback. The
    # default libnccl-net.so missing is neutral (corpus issue_nccl1232), so only a requested plugin counts.
    lines = ["h1:5 NCCL_NET_PLUGIN set by environment to ofi",
             "h1:5 NET/Plugin : Plugin load (libnccl-net-ofi.so) returned 2 : cannot open shared object file",
             *comm("h1:5", 0), "h1:5 Using network Socket"]
    net, _ = verdict(gen(tmp_path, "a.log", *lines))
    assert net.verdict == "tcp_silent_fallback" and [e.line for e in net.evidence] == [5, 2]
    neutral = ["h1:5 NET/Plugin : Plugin load (libnccl-net.so) returned 2 : cannot open shared object file",
               *comm("h1:5", 0), "h1:5 Using network Socket"]
    assert verdict(gen(tmp_path, "b.log", *neutral))[0].verdict == "tcp_no_rdma"


def test_nccl_net_socket_comes_from_the_environment(tmp_path):
    # NCCL never echoes NCCL_NET (§8.1): the manifest's recorded environment says TCP was chosen.
    env = [EnvSetting("run/manifest.json", "NCCL_NET", "Socket")]
    net, found = verdict(gen(tmp_path, "a.log", *comm("h1:5", 0), "h1:5 Using network Socket"), env=env)
    assert (net.verdict, net.severity) == ("tcp_deliberate", "info")
    assert net.evidence[-1].file == "run/manifest.json" and net.evidence[-1].line is None
    assert diagnosis(found).advice.startswith("intended by NCCL_NET=Socket")


def test_interleaved_ranks_of_two_communicators(tmp_path):
    # Four ranks on two hosts in one file, their lines interleaved: the world communicator (commId 0xaa,
    # 2 nodes) connects over IB with GPUDirect; the tensor-parallel one (commId 0xbb, 1 node) over P2P.
    procs = {}
    for rank, who in enumerate(("a:1", "a:2", "b:3", "b:4")):
        own = comm(who, rank, nranks=4, ptr=f"0x{rank}0", cid="0xaa")
        if rank % 2:
            own.append(f"{who} Channel 00/0 : {rank}[0] -> {(rank + 1) % 4}[0] [send] via NET/IB/0/GDRDMA")
        own += comm(who, rank % 2, nranks=2, nnodes=1, ptr=f"0x{rank}1", cid="0xbb")
        if rank % 2 == 0:
            own.append(f"{who} Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM")
        procs[who] = own
    lines = [line for group in zip(*(p + [""] * (6 - len(p)) for p in procs.values())) for line in group if line]
    net, _ = verdict(gen(tmp_path, "all.log", *lines))
    by_id = {c.id: c for c in net.communicators}
    assert {k: (c.verdict, c.n_nodes, c.hosts, c.connections) for k, c in by_id.items()} == {
        "0xaa": ("rdma_gdr", 2, ["a", "b"], {"NET/IB": 2}),
        "0xbb": ("intra_node_only", 1, ["a", "b"], {"P2P/CUMEM": 2})}
    assert by_id["0xaa"].ranks == [0, 1, 2, 3] and net.verdict == "rdma_gdr"


def test_one_communicator_on_sockets_decides_the_run(tmp_path):
    lines = [*comm("a:1", 0, ptr="0x1", cid="0xA"), "a:1 Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA",
             *comm("a:1", 0, ptr="0x2", cid="0xB"), "a:1 Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0"]
    net, _ = verdict(gen(tmp_path, "a.log", *lines))
    # The IB connection of the other communicator is RDMA evidence: sockets here are a fallback.
    assert [c.verdict for c in net.communicators] == ["rdma_gdr", "tcp_silent_fallback"]
    assert net.verdict == "tcp_silent_fallback" and [e.line for e in net.evidence] == [6, 3]


# ------------------------------------------------------------------------------------ bandwidth cross-check

def rdma_logs(folder, via="NET/IB/0/GDRDMA"):
    """Two hosts' logs of a 2-rank, 2-node run: one connection line each."""
    (folder / "nccl").mkdir(parents=True, exist_ok=True)
    for rank, (host, pid) in enumerate((("h1", 100), ("h2", 200))):
        lines = comm(f"{host}:{pid}", rank, nranks=2, nnodes=2, local=1) + \
            [f"{host}:{pid} Channel 00/0 : {rank}[0] -> {1 - rank}[0] [send] via {via}"]
        gen(folder / "nccl", f"{host}.{pid}.log", *lines)


# A 2-rank run, one 25 MiB all-reduce of 12 ms per step on each rank (synth scenario below): busbw =
# 26,214,400 B / 12,000,000 ns x 2(n-1)/n (n = 2) = 2.185 GB/s, below the 5 GB/s TCP ceiling.
TCP_RUN = dict(buckets=[(10_000_000, 12_000_000)], steps=2)
TCP_BUSBW = round(26_214_400 / 12_000_000, 3)


def test_logs_say_rdma_but_the_bandwidth_is_tcp(tmp_path):
    from fixtures import synth

    run = tmp_path / "run"
    synth.write(synth.Scenario("tcp_run", **TCP_RUN), run)
    rdma_logs(run)
    rep = api.report([str(run)])
    net = rep.transport
    assert (net.verdict, net.severity, net.multi_node, net.logs) == ("rdma_gdr", "warning", True, 2)
    bw = net.bandwidth
    # 2 steps x 1 all-reduce, matched across the two ranks (process group "0" and its order in the step: the
    # synth traces carry no Seq) and measured over their transfer time: 2 instances, source cross-rank.
    assert (bw.range, bw.source, bw.busbw_gbps_p50, bw.collectives) == ("tcp", "cross-rank", TCP_BUSBW, 2)
    d = next(d for d in rep.diagnoses if d.id == "nccl-transport")
    assert d.severity == "warning" and "although the logs say RDMA" in d.detail
    assert f"inter-node bus bandwidth {TCP_BUSBW:.2f} GB/s" in d.detail and "disagree" in d.advice
    # Raising the TCP ceiling to 1 GB/s puts the same run in the ambiguous range: no disagreement.
    calm = api.report([str(run)], thresholds=["transport_tcp_max_busbw_gbps=1"])
    assert (calm.transport.severity, calm.transport.bandwidth.range) == ("info", "ambiguous")


def test_no_logs_multi_node_and_tcp_bandwidth_is_tcp_suspected(tmp_path):
    import json

    from fixtures import synth

    run = tmp_path / "run"
    synth.write(synth.Scenario("tcp_run", **TCP_RUN), run)
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}       # one rank per node: the job spans two nodes
    (run / "manifest.json").write_text(json.dumps({"schema": "tracelens.manifest/1", "world_size": 2, "ranks": [
        {"rank": r, "env": env} for r in range(2)]}))
    rep = api.report([str(run)])
    assert (rep.transport.verdict, rep.transport.severity, rep.transport.logs) == ("tcp_suspected", "warning", 0)
    d = next(d for d in rep.diagnoses if d.id == "nccl-transport")
    assert d.title == "network transport: TCP suspected from the bandwidth"
    assert "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET" in d.advice and "tracelens collect" in d.advice


def test_without_logs_or_inter_node_evidence_there_is_no_transport(tmp_path):
    from fixtures import synth

    run = tmp_path / "run"
    synth.write(synth.Scenario("tcp_run", **TCP_RUN), run)
    rep = api.report([str(run)])             # nothing says the ranks are on different nodes
    assert rep.transport is None and not [d for d in rep.diagnoses if d.id == "nccl-transport"]


def test_busbw_factors_and_transfer_time():
    from tracelens.analyzers.run import transport_bw

    # nccl-tests factors (reference metrics.md §3): 1 GB all-reduce on 8 ranks in 100 ms -> 10 GB/s algbw,
    # x 2*7/8 = 17.5 GB/s; all-gather x 7/8 = 8.75; broadcast x 1 = 10.
    assert transport_bw.busbw_gbps("all_reduce", 10**9, 8, 100_000_000) == pytest.approx(17.5)
    assert transport_bw.busbw_gbps("all_gather", 10**9, 8, 100_000_000) == pytest.approx(8.75)
    assert transport_bw.busbw_gbps("broadcast", 10**9, 8, 100_000_000) == pytest.approx(10.0)
    assert transport_bw.busbw_gbps("barrier", 10**9, 8, 100_000_000) is None

    import numpy as np
    from types import SimpleNamespace

    def table(durations, seq):
        n = len(durations)
        return {"bytes": np.full(n, 10**9), "group_size": np.full(n, 8), "start_ns": np.zeros(n, dtype=np.int64),
                "end_ns": np.array(durations, dtype=np.int64), "seq": np.array(seq), "op": np.array(["all_reduce"] * n,
                dtype=object), "pg_name": np.array(["0"] * n, dtype=object)}
    # The same instance (pg 0, seq 5) took 100 ms on rank 0 and 400 ms on rank 1, which waited for rank 0:
    # the transfer time is the shorter one. A 1 kB message is left out (latency-bound).
    ranks = [SimpleNamespace(rank=0, comm=table([100_000_000], [5])),
             SimpleNamespace(rank=1, comm=table([400_000_000], [5]))]
    rows = transport_bw.rows_from_comm(ranks, 1_000_000)
    assert [(r.busbw_gbps, r.inter_node) for r in rows] == [(pytest.approx(17.5), None)]
    placed = transport_bw.placed(rows, True, 4)                  # 8 ranks > 4 per node: crosses nodes
    assert placed[0].inter_node is True and transport_bw.placed(rows, True, 8)[0].inter_node is False


def test_nsys_recorded_environment_feeds_the_verdict(tmp_path):
    from fixtures import synth

    # The export records NCCL_NET=Socket (never echoed by NCCL) and a 2-node layout for each process.
    env = {"NCCL_NET": "Socket", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    run = tmp_path / "run"
    synth.write_nsys(synth.Scenario("nsys_tcp", **TCP_RUN, env=env), run)
    gen(tmp_path, "h1.5.log", "h1:5 Using network Socket")
    rep = api.report([str(run), str(tmp_path / "h1.5.log")])
    net = rep.transport
    assert (net.verdict, net.multi_node, net.env["NCCL_NET"]) == ("tcp_deliberate", True, "Socket")
    assert [(e.line, e.text) for e in net.evidence] == [(1, "h1:5:6 [0] NCCL INFO Using network Socket"),
                                                        (None, "NCCL_NET=Socket")]
    assert net.evidence[1].file.endswith(".sqlite")


def test_a_collect_run_directory_reads_its_nccl_folder(tmp_path):
    import json

    from fixtures import synth

    run = tmp_path / "run"
    synth.write(synth.Scenario("tcp_run", **TCP_RUN), run)
    rdma_logs(run, via="NET/IB/0")
    (run / "manifest.json").write_text(json.dumps({"schema": "tracelens.manifest/1", "world_size": 2, "ranks": [
        {"rank": r, "nccl_log": f"nccl/{h}.log", "env": {"NCCL_IB_HCA": "mlx5_0"}}
        for r, h in ((0, "h1.100"), (1, "h2.200"))]}))
    rep = api.report([str(run)])
    # Each log once among the inputs, with the rank the manifest gives it; the verdict from both.
    logs = sorted((i.path.rsplit("/", 1)[-1], i.rank) for i in rep.inputs if i.format == "nccl-log")
    assert logs == [("h1.100.log", 0), ("h2.200.log", 1)]
    assert (rep.transport.verdict, rep.transport.logs, rep.transport.env) == \
        ("rdma_host_staged", 2, {"NCCL_IB_HCA": "mlx5_0"})


def test_nccl_output_captured_by_nsys(tmp_path):
    import sqlite3

    from fixtures import synth

    # nsys keeps a process's stdout in ProcessStreams (reference nsys-sqlite.md): NCCL's lines there count
    # as a log of that process, cited as <export>:<stream file>.
    run = tmp_path / "run"
    (export,) = synth.write_nsys(synth.Scenario("nsys_streams", **TCP_RUN, ranks=1), run, per_rank=False)
    db = sqlite3.connect(export)
    (gpid,) = db.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    ids = [max(r[0] for r in db.execute("SELECT id FROM StringIds")) + i for i in (1, 2)]
    text = ("step 1\nh1:5:6 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
            "h1:5:6 [0] NCCL INFO Using network Socket\n")
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(ids[0], "/tmp/streams/pid_5_stdout.log"), (ids[1], text)])
    db.execute("CREATE TABLE ProcessStreams (globalPid INTEGER, filenameId INTEGER, contentId INTEGER)")
    db.execute("INSERT INTO ProcessStreams VALUES (?, ?, ?)", (gpid, ids[0], ids[1]))
    db.commit()
    db.close()
    rep = api.report([str(export)])
    assert rep.transport.verdict == "tcp_deliberate"
    assert [(e.file, e.line) for e in rep.transport.evidence] == [(f"{export.name}:pid_5_stdout.log", 3),
                                                                 (f"{export.name}:pid_5_stdout.log", 2)]


def test_the_gate_fails_a_silent_fallback(tmp_path):
    from fixtures import synth

    # The run's logs name no rank (bare "NCCL INFO" lines): the critical finding has rank -1 and fails
    # --no-critical for every rank of the run.
    run = tmp_path / "run"
    synth.write(synth.Scenario("tcp_run", **TCP_RUN), run)
    (run / "fallback.log").write_text("NCCL INFO NET/Socket : Using [0]ib0:10.1.0.1<0>\n")    # IPoIB
    result = api.gate([str(run)], rules={"no_critical": True}, use_config=False)
    (rule,) = result.rules
    assert rule.status == "fail" and [r.status for r in rule.ranks] == ["fail", "fail"]


# ------------------------------------------------------------------------------ a big log (issue 49 item 7)
# Jobs of many ranks writing to one NCCL_DEBUG_FILE make files of the same lines over and over; one corpus
# log appended to itself stands for them (bench/bench_nccl_log.py times 59 and 200 MB of it).

HEALTHY = "issue_nccl1189_ib_gdrdma_and_p2p_cumem_h20.log"      # rdma_gdr, 14 lines (corpus SOURCE.md)


def _repeated(tmp_path, name, times):
    path = tmp_path / f"{times}x_{name}"
    path.write_bytes(corpus_file(LOGS + name).read_bytes() * times)
    return path


@pytest.mark.parametrize("name", sorted(CORPUS_VERDICTS))
def test_a_log_appended_to_itself_has_the_verdict_and_evidence_of_the_log(tmp_path, name):
    one = nccl_log.parse(_repeated(tmp_path, name, 1))
    three = nccl_log.parse(_repeated(tmp_path, name, 3))
    assert three.nccl_lines == 3 * one.nccl_lines
    (a, _), (b, _) = verdict(one), verdict(three)
    assert (b.verdict, b.severity, b.multi_node) == (a.verdict, a.severity, a.multi_node)
    # The first copy's lines are the ones cited; the file name is the only difference.
    assert [(e.line, e.text) for e in b.evidence] == [(e.line, e.text) for e in a.evidence]
    # A connection line is counted each time it is written.
    assert [c.connections for c in b.communicators] == [{k: 3 * n for k, n in c.connections.items()}
                                                       for c in a.communicators]


def test_a_log_repeated_a_thousand_times_keeps_the_records_of_the_log(tmp_path):
    one = corpus_log(HEALTHY)
    many = nccl_log.parse(_repeated(tmp_path, HEALTHY, 1000))        # 1.3 MB
    assert [(r.kind, r.line, r.text) for r in many.records] == [(r.kind, r.line, r.text) for r in one.records]
    assert [r.count for r in many.records] == [1000 * r.count for r in one.records]
    assert (many.nccl_lines, many.truncated, many.replaced) == (14_000, False, 0)    # 14 NCCL lines a copy


def _stamped(tmp_path, times):
    """The healthy log ``times`` over, a log shipper's prefix on each line, each one different
    ("[2026-12-02 01:000042] ")."""
    text = corpus_file(LOGS + HEALTHY).read_text()
    path = tmp_path / f"stamped{times}.log"
    path.write_text("".join(f"[2026-12-02 01:{n:06d}] {line}\n" for n, line in enumerate(text.splitlines() * times)))
    return path


def test_a_timestamp_on_every_line_does_not_make_every_line_a_record(tmp_path):
    # What NCCL wrote behind the prefix repeats 2,000 times: it is kept once with its count, as without the
    # prefix. Before, every line with a record was one: 28,000 records for 2,000 copies.
    one = corpus_log(HEALTHY)
    many = nccl_log.parse(_stamped(tmp_path, 2000))
    assert [(r.kind, r.data) for r in many.records] == [(r.kind, r.data) for r in one.records]
    assert [r.count for r in many.records] == [2000 * r.count for r in one.records]
    assert [r.line for r in many.records] == [r.line for r in one.records]           # the first copy's, cited
    assert many.nccl_lines == 2000 * one.nccl_lines
    (a, _), (b, _) = verdict(one), verdict(many)
    assert (b.verdict, b.severity) == (a.verdict, a.severity)
    assert [c.connections for c in b.communicators] == [{k: 2000 * n for k, n in c.connections.items()}
                                                       for c in a.communicators]


def test_lines_met_once_do_not_grow_memory_past_the_lines_remembered(tmp_path, monkeypatch):
    # Every line distinct: what the parse holds is a chunk, its lines and the remembered lines (at most
    # _CACHE_MOST; made small here, with small chunks, so that a small file passes both): four times the
    # file (0.8 and 3.2 MB) is about the same peak. Before, each line's record was kept with it: 37 MB of
    # records for the 3.2 MB file.
    import tracemalloc

    monkeypatch.setattr(nccl_log, "_CACHE_MOST", 1024)
    peaks = []
    for times in (500, 2000):
        path = _stamped(tmp_path, times)
        tracemalloc.start()
        try:
            log = nccl_log.parse(path, chunk=1 << 16)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert len(log.records) == len(corpus_log(HEALTHY).records)
    assert peaks[1] < 1.5 * peaks[0] and peaks[1] < path.stat().st_size / 4, peaks


def test_a_line_cut_by_a_chunk_boundary_is_read_whole(tmp_path):
    # 64 copies (83 kB) pass the 64 KiB head read first; 97 bytes a chunk cuts most of the ~92-byte lines.
    path = _repeated(tmp_path, "issue_nccl952_ib_nodevice_p2pipc_plus_socket.log", 64)
    whole, cut = nccl_log.parse(path), nccl_log.parse(path, chunk=97)
    assert [(r.kind, r.line, r.text, r.count, r.data) for r in cut.records] == \
        [(r.kind, r.line, r.text, r.count, r.data) for r in whole.records]
    assert (cut.nccl_lines, cut.bytes) == (whole.nccl_lines, path.stat().st_size)
    assert verdict(cut)[0].verdict == "tcp_no_rdma"


def test_parsing_holds_a_chunk_not_the_file(tmp_path):
    import tracemalloc

    path = _repeated(tmp_path, HEALTHY, 8000)                        # 10.4 MB
    tracemalloc.start()
    try:
        log = nccl_log.parse(path, chunk=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert log.nccl_lines == 8000 * 14
    # The chunk, its lines split out and the carried rest joined to the next: 5.1 MB measured, a few chunks
    # and under the file's size (reading the whole file held its bytes and its text at once, 2x the file
    # before the first record).
    assert peak < 8 << 20
