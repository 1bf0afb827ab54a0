"""The network transport NCCL used between nodes (analyzers/run/transport.py), quoting the log lines that
decided it; a communicator whose bus bandwidth is well below its peers' (analyzers/run/crossrank/slow_links.py)."""

from __future__ import annotations

import re

from .base import Finding, comm_label, hosts_label, ms, noun, pct, ranks_label, sizes_label


def _quote(lines: list[dict]) -> str:
    """``nccl/a.log:12 "NET/Socket : Using [0]eth0:…"``: each deciding line by file name and number (a
    recorded setting by its source alone), NCCL's message without the host:pid:tid prefix."""
    out = []
    for e in lines:
        where = e["file"].replace("\\", "/").rsplit("/", 1)[-1] + (f":{e['line']}" if e["line"] is not None else "")
        text = re.split(r"NCCL (?:INFO|WARN) ", e["text"], maxsplit=1)[-1]
        out.append(f'{where} "{text}"')
    return "; ".join(out)


def _bandwidth(ev: dict) -> str:
    bw = ev["bandwidth"]
    if bw is None:
        return ""
    where = {"tcp": f"the TCP range (below {bw['tcp_max_gbps']:g} GB/s)",
             "rdma": f"the RDMA range (above {bw['rdma_min_gbps']:g} GB/s)",
             "ambiguous": f"between the TCP and RDMA ranges ({bw['tcp_max_gbps']:g}-{bw['rdma_min_gbps']:g} GB/s)"}
    return (f"inter-node bus bandwidth {bw['p50_gbps']:.2f} GB/s (median of {bw['collectives']} "
            f"collective{'s' if bw['collectives'] != 1 else ''}), in {where[bw['range']]}")


def _transport_detail(lead: str, ev: dict) -> str:
    parts = [lead + (": " + _quote(ev["lines"]) if ev["lines"] else "")]
    if ev["bandwidth"] is not None:
        parts.append(_bandwidth(ev) + (" although the logs say RDMA" if ev["bandwidth_disagrees"] else ""))
    return "; ".join(parts)


_RDMA_CHECKS = ("ibv_devinfo on every node (devices listed, port state PORT_ACTIVE), the container's "
                "/dev/infiniband (--device=/dev/infiniband or the RDMA device plugin), NCCL_IB_HCA naming "
                "devices that exist (NCCL_IB_GID_INDEX for RoCE), libibverbs installed, and the NET plugin path "
                "(NCCL_NET_PLUGIN, LD_LIBRARY_PATH)")
_COLLECT = ("collect the NCCL logs: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET with NCCL_DEBUG_FILE=<dir>/%h.%p.log "
            "(tracelens collect sets them), then tracelens report with the logs")
_DISAGREE = ("the logs and the bandwidth disagree: check that every rank's log is there (one rank on sockets "
             "slows all), and compare with an nccl-tests run on the same nodes")


def _net(ev: dict) -> str:
    return f" ({ev['net']})" if ev["net"] else ""


def tcp_silent_fallback(f: Finding) -> tuple[str, str, str]:
    return ("network transport: TCP sockets between nodes, a silent fallback from RDMA",
            _transport_detail("NCCL fell back to TCP sockets where RDMA was expected", f.evidence),
            f"find why RDMA failed: {_RDMA_CHECKS}; NCCL_NET=IB makes NCCL stop with an error instead of "
            "falling back")


def tcp_no_rdma(f: Finding) -> tuple[str, str, str]:
    return ("network transport: TCP sockets between nodes, no RDMA found",
            _transport_detail("NCCL uses TCP sockets between nodes and found no RDMA device", f.evidence),
            "expected on an Ethernet-only cluster, but inter-node collectives run several times slower than over "
            f"RDMA; if the nodes have InfiniBand or RoCE, check {_RDMA_CHECKS}; on TCP, raise "
            "NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD")


def tcp_deliberate(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    by = " and ".join(ev["forced_by"])
    return ("network transport: TCP sockets, chosen deliberately",
            _transport_detail(f"TCP was forced by {by}", ev),
            f"intended by {by}: if the nodes have InfiniBand or RoCE, remove it to use RDMA")


def tcp_suspected(f: Finding) -> tuple[str, str, str]:
    return ("network transport: TCP suspected from the bandwidth",
            _transport_detail("no NCCL log line says which transport was used", f.evidence), _COLLECT)


def rdma_gdr(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    return (f"network transport: RDMA{_net(ev)} with GPUDirect RDMA",
            _transport_detail("network connections use RDMA straight from GPU memory", ev),
            _DISAGREE if ev["bandwidth_disagrees"] else "")


def rdma_host_staged(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    advice = ("GPUDirect RDMA is off: check that the nvidia-peermem module is loaded, NCCL_NET_GDR_LEVEL, and "
              "how far the GPU sits from its NIC (nvidia-smi topo -m)")
    return (f"network transport: RDMA{_net(ev)} without GPUDirect, staged through host memory",
            _transport_detail("network connections use RDMA without /GDRDMA", ev),
            f"{_DISAGREE}; {advice}" if ev["bandwidth_disagrees"] else advice)


def rdma_init_only(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    advice = ("connection lines would confirm it (\"via NET/IB/0/GDRDMA\"): keep NCCL_DEBUG_SUBSYS at INIT,NET "
              "and let the run reach its first collective")
    return (f"network transport: RDMA{_net(ev)} initialised, no connection lines",
            _transport_detail("NCCL set up an RDMA network", ev),
            f"{_DISAGREE}; {advice}" if ev["bandwidth_disagrees"] else advice)


def intra_node_only(f: Finding) -> tuple[str, str, str]:
    return ("network transport: not used, every connection stays within one node",
            _transport_detail("no connection leaves the node", f.evidence), "")


def transport_inconclusive(f: Finding) -> tuple[str, str, str]:
    return ("network transport: inconclusive from the NCCL logs",
            _transport_detail("the lines read do not say which transport carried traffic between nodes",
                              f.evidence), _COLLECT)


def transport_unknown(f: Finding) -> tuple[str, str, str]:
    return ("network transport: unknown (no NCCL logs)",
            _transport_detail("no NCCL log was given", f.evidence), _COLLECT)


_LAYOUT = {"one-host": "members on one host", "two-hosts": "members on two hosts",
           "many-hosts": "members on three or more hosts"}


def slow_link(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    sized = sizes_label(ev["bytes_min"], ev["bytes_max"])
    title = (f"slow link: {comm_label(ev)} {hosts_label(ev['hosts'])} runs at {ev['busbw_gbps']:.2f} GB/s bus "
             f"bandwidth, {pct(100 * ev['share'])} of its peers' {ev['peers_busbw_gbps']:.2f} GB/s")
    peers = ev["peer_comms"]
    detail = (f"{ev['instances']} {noun(ev['op'], ev['instances'], 'gpu')} of {sized} of {ranks_label(ev['ranks'])} "
              f"({_LAYOUT[ev['layout']]}), against {ev['peer_instances']} instances of {peers} other "
              f"communicator{'s' if peers != 1 else ''} of the same op, size bucket and layout (median busbw below "
              f"{pct(100 * ev['max_share'])} of theirs, at least {ev['min_instances']} instances each); their "
              f"transfers took {ms(ev['transfer_ns'])}, {ms(ev['lost_ns'])} more than at the peers' bus bandwidth. "
              f"What mending it saves per step is unknown: {ev['saving_note']}")
    if ev["layout"] == "one-host":
        advice = (f"check the links {hosts_label(ev['hosts'])}: NVLink or PCIe between these GPUs (nvidia-smi topo -m, "
                  "nvidia-smi nvlink -s and its error counters), whether NCCL uses P2P between them (NCCL_DEBUG=INFO "
                  "NCCL_DEBUG_SUBSYS=INIT: via P2P/IPC or SHM; NCCL_P2P_DISABLE unset); then run nccl-tests "
                  "(all_reduce_perf) on these GPUs alone")
    else:
        advice = (f"check the links {hosts_label(ev['hosts'])}: the NICs (ibstat or ibv_devinfo: port state and rate, "
                  "error counters), cables and switch ports; the transport NCCL chose for this communicator "
                  "(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET: NET/IB or NET/Socket, GDRDMA) and the HCAs it uses "
                  "(NCCL_IB_HCA); then run nccl-tests (all_reduce_perf) between these hosts alone and between two "
                  "that are not slow")
    return title, detail, advice


SENTENCES = {
    ("slow-link", None): slow_link,
    ("nccl-transport", "tcp_silent_fallback"): tcp_silent_fallback,
    ("nccl-transport", "tcp_no_rdma"): tcp_no_rdma,
    ("nccl-transport", "tcp_deliberate"): tcp_deliberate,
    ("nccl-transport", "tcp_suspected"): tcp_suspected,
    ("nccl-transport", "rdma_gdr"): rdma_gdr,
    ("nccl-transport", "rdma_host_staged"): rdma_host_staged,
    ("nccl-transport", "rdma_init_only"): rdma_init_only,
    ("nccl-transport", "intra_node_only"): intra_node_only,
    ("nccl-transport", "inconclusive"): transport_inconclusive,
    ("nccl-transport", "unknown"): transport_unknown,
}
