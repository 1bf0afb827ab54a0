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
from tracelens.nccl_records import EnvSetting
from tracelens.parsers import nccl_log

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
