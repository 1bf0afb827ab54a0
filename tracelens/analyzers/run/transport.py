"""The network transport verdict: which transport NCCL used between nodes, and whether TCP was deliberate.

It reads the records of the NCCL logs (tracelens/model/nccl_records.py), the NCCL settings recorded beside them
(collect manifest, nsys export) and the inter-node bandwidth (transport_bw.py); never a file. Each
communicator gets a verdict from its connection lines, and from the run's initialisation lines where it has
none; the run's verdict is the most serious of its communicators'. The rules, in plain words, are in
docs/metrics.md ("Network transport"); the line patterns behind them in ../shared/reference/nccl-transport.md
(§4, as corrected in §8).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...model import nccl_records as K
from ...contract import Communicator, EvidenceLine, Transport
from ...errors import printable
from ...model.nccl_records import EnvSetting, NcclLog, Record
from ..thresholds import Thresholds
from ..wording import Finding
from . import transport_bw

# Most serious first: the run's verdict is the first its communicators reach.
PRIORITY = ("tcp_silent_fallback", "tcp_no_rdma", "tcp_suspected", "tcp_deliberate", "rdma_host_staged",
            "rdma_gdr", "rdma_init_only", "intra_node_only", "inconclusive", "unknown")
SEVERITY = {"tcp_silent_fallback": "critical", "tcp_no_rdma": "warning", "tcp_suspected": "warning"}
RDMA = ("rdma_gdr", "rdma_host_staged", "rdma_init_only")
OLD_SOCKETS = (2, 4, 6)       # up to this version every rank initialised sockets beside IB (not a fallback)
DEFAULT_PLUGIN = "libnccl-net.so"
MOST_EVIDENCE = 8
_IPOIB = re.compile(r"^ib[0-9psP]")          # ib0, ibp12s0, ibs85f0, ibP...: sockets over InfiniBand


def _line(r: Record) -> EvidenceLine:
    return EvidenceLine(file=printable(r.file, one_line=True), line=r.line, text=r.text)


def _setting(s: EnvSetting) -> EvidenceLine:
    return EvidenceLine(file=printable(s.source, one_line=True), line=None, text=f"{s.name}={s.value}")


@dataclass
class Facts:
    """What the whole run's initialisation lines and settings say (network init is once per process)."""

    version: tuple | None = None
    old_sockets: bool = False
    env: dict[str, str] = field(default_factory=dict)
    forced: list[EvidenceLine] = field(default_factory=list)      # TCP chosen on purpose ...
    forced_by: list[str] = field(default_factory=list)            # ... by these settings (NAME=value)
    strong: list[EvidenceLine] = field(default_factory=list)      # RDMA was expected
    weak: list[EvidenceLine] = field(default_factory=list)        # IB looked for, no device found
    socket: list[Record] = field(default_factory=list)            # the socket transport selected
    rdma: list[Record] = field(default_factory=list)              # an RDMA network initialised
    ambiguous: list[Record] = field(default_factory=list)         # socket lines of the old versions
    loopback: list[Record] = field(default_factory=list)          # the interface lines, when all are lo
    world: tuple[int | None, int | None] = (None, None)           # WORLD_SIZE, LOCAL_WORLD_SIZE
    ranks: dict[tuple, int] = field(default_factory=dict)         # process -> its (first) rank
    lines: int = 0                                                # NCCL lines read


def facts(logs: list[NcclLog], env: list[EnvSetting]) -> Facts:
    f = Facts(lines=sum(log.nccl_lines for log in logs))
    recs = [r for log in logs for r in log.records]
    by = {}
    for r in recs:
        by.setdefault(r.kind, []).append(r)
    versions = [r.data["version"] for r in by.get(K.VERSION, [])]
    f.version = max(versions) if versions else None
    # A process printing both a socket and an IB "Using" line is NCCL <= 2.4.6, which set up both.
    twice = {r.process for r in by.get(K.SOCKET, [])} & {r.process for r in by.get(K.IB, [])}
    both = [r for r in by.get(K.SOCKET, []) + by.get(K.IB, []) if r.process in twice]
    f.old_sockets = f.version <= OLD_SOCKETS if f.version else bool(both)
    _settings(f, by.get(K.ENV, []), env)
    for r in by.get(K.IB, []) + [r for r in by.get(K.GDR_HCA, []) if r.data["net"] == "IB"] + by.get(K.VERBS_FAIL, []):
        f.strong.append(_line(r))
    for r in by.get(K.PLUGIN_INIT_FAIL, []):
        (f.weak if r.data.get("name") in ("IB", "Socket") else f.strong).append(_line(r))
    for r in by.get(K.PLUGIN_MISSING, []):
        if "NCCL_NET_PLUGIN" in f.env or r.data.get("name", DEFAULT_PLUGIN) != DEFAULT_PLUGIN:
            f.strong.append(_line(r))
    f.weak += [_line(r) for r in by.get(K.NO_IB, [])]
    # An RDMA connection of any communicator: the hardware works, sockets elsewhere are a fallback.
    f.strong += [_line(r) for r in by.get(K.CONN, []) if r.data["transport"] in ("NET", "COLLNET")
                 and r.data.get("net", "").lower() != "socket"][:1]
    ifaces = [(r, i) for r in by.get(K.SOCKET, []) + by.get(K.BOOTSTRAP, []) for i in r.data["interfaces"]]
    f.strong += [_line(r) for r in dict.fromkeys(r for r, i in ifaces if _IPOIB.match(i))] if ifaces else []
    if ifaces and all(i == "lo" for _, i in ifaces):
        f.loopback = list(dict.fromkeys(r for r, _ in ifaces))
    for r in by.get(K.NET, []) + by.get(K.PLUGIN_ASSIGNED, []) + by.get(K.PLUGIN_INIT, []):
        (f.socket if r.data.get("name", "").lower() == "socket" else f.rdma).append(r)
    if f.old_sockets:
        f.ambiguous = both or by.get(K.SOCKET, [])
    else:
        f.socket += by.get(K.SOCKET, [])
    f.rdma += by.get(K.IB, []) + by.get(K.OFI, []) + by.get(K.PLUGIN_LOADED, [])
    for r in by.get(K.COMM, []) + by.get(K.CONN, []):
        if r.pid is not None:
            f.ranks.setdefault(r.process, r.data["rank"] if r.kind == K.COMM else _own_rank(r))
    return f


def _settings(f: Facts, echoed: list[Record], env: list[EnvSetting]) -> None:
    """The NCCL variables in force (a log's echo first, then the recorded environment), and which of them
    force TCP or say RDMA was expected. NCCL never echoes NCCL_NET: only the environment has it."""
    where: dict[str, EvidenceLine] = {}
    for r in echoed:
        if r.data["name"] not in f.env:
            f.env[r.data["name"]], where[r.data["name"]] = r.data["value"], _line(r)
    for s in env:
        if s.name.startswith("NCCL_") and s.name not in f.env:
            f.env[s.name], where[s.name] = s.value, _setting(s)
        elif s.name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE") and s.value.isdigit():
            ws, lws = f.world
            f.world = (int(s.value), lws) if s.name == "WORLD_SIZE" else (ws, int(s.value))
    forcing = (("NCCL_IB_DISABLE", lambda v: v not in ("", "0")), ("NCCL_NET", lambda v: v.lower() == "socket"))
    for name, forces in forcing:
        if forces(f.env.get(name, "").strip()):
            f.forced.append(where[name])
            f.forced_by.append(f"{name}={f.env[name]}")
    f.strong += [where[n] for n in ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX") if f.env.get(n, "").strip()]


def _own_rank(r: Record) -> int:
    """The rank that printed a connection line: the receiver of a [receive] line, else the sender."""
    return r.data["to"] if r.data.get("to") is not None and " [receive] " in r.text else r.data["from"]


# ------------------------------------------------------------------------------------------ communicators

@dataclass
class Group:
    id: str
    records: list[Record] = field(default_factory=list)


def groups(logs: list[NcclLog]) -> list[Group]:
    """The lines of each communicator: a process's lines belong to the communicator it last announced
    (``comm 0x… rank …``, ``Init START``); PyTorch creates communicators one after another. Communicators
    are joined across processes by the commId NCCL prints. Without any communicator line: one group."""
    comms = [r for log in logs for r in log.records if r.kind == K.COMM and r.data.get("comm")]
    alias = {(r.process, r.data["comm"]): r.data["comm_id"] for r in comms if r.data.get("comm_id")}
    current: dict[tuple, str] = {}
    out: dict[str, Group] = {}
    loose = Group("all")
    for log in logs:
        for r in log.records:
            if r.kind == K.COMM and r.data.get("comm"):
                key = (r.process, r.data["comm"])
                current[r.process] = alias.get(key) or f"{r.data['comm']}@{r.host}:{r.pid}"
            gid = current.get(r.process)
            (out.setdefault(gid, Group(gid)) if gid else loose).records.append(r)
    if not out:
        return [loose]
    if any(r.kind == K.CONN for r in loose.records):
        out["all"] = Group("all", list(loose.records))
    for g in out.values():      # lines before a process's first communicator are its network setup
        g.records += [r for r in loose.records if r.kind != K.CONN]
    return list(out.values())


def multi_node(recs: list[Record], f: Facts) -> bool | None:
    """Whether the communicator spans nodes: nNodes, host names, network connections, the launcher's
    WORLD_SIZE/LOCAL_WORLD_SIZE, loopback-only interfaces, one host holding every rank; None when unsaid."""
    nodes = [r.data["nnodes"] for r in recs if r.kind == K.COMM and r.data.get("nnodes")]
    if nodes:
        return max(nodes) > 1
    hosts = {r.host for r in recs if r.host}
    if len(hosts) > 1 or any(r.kind == K.CONN and r.data["transport"] in ("NET", "COLLNET") for r in recs):
        return True
    ws, lws = f.world
    if ws and lws:
        return ws > lws
    if f.loopback:
        return False
    nranks = [r.data["nranks"] for r in recs if r.kind == K.COMM]
    procs = {r.process for r in recs if r.pid is not None}
    if len(hosts) == 1 and nranks and len(procs) >= max(nranks):
        return False
    return None


def decide(recs: list[Record], f: Facts, multi: bool | None) -> tuple[str, list[EvidenceLine]]:
    """One communicator's verdict and the lines it rests on (docs/metrics.md, "Network transport")."""
    conns = [r for r in recs if r.kind == K.CONN]
    net = [r for r in conns if r.data["transport"] in ("NET", "COLLNET")]
    tcp = [r for r in net if r.data.get("net", "").lower() == "socket"]
    rdma = [r for r in net if r not in tcp]
    if tcp:
        return _tcp(_lines(tcp, 2), f, [_line(r) for r in rdma[:1]])
    if rdma:
        staged = [r for r in rdma if not r.data["gdr"]]
        return ("rdma_host_staged", _lines(staged, 2)) if staged else ("rdma_gdr", _lines(rdma, 2))
    if f.socket and f.forced:
        return "tcp_deliberate", _lines(f.socket, 2) + f.forced
    if multi is False or (conns and multi is None):
        nodes = [r for r in recs if r.kind == K.COMM and r.data.get("nnodes") == 1]
        return "intra_node_only", _lines(conns, 2) + _lines(nodes or f.loopback, 1) + _lines(f.socket, 1)
    if f.socket:
        if multi or f.strong:
            return _tcp(_lines(f.socket, 2), f)
        return "inconclusive", _lines(f.socket, 2) + f.weak[:1]
    if f.rdma and not f.ambiguous:
        return "rdma_init_only", _lines(f.rdma, 2)
    if f.lines:
        return "inconclusive", _lines(f.ambiguous, 3)
    return "unknown", []


def _tcp(lines: list[EvidenceLine], f: Facts, rdma: list[EvidenceLine] = ()) -> tuple[str, list[EvidenceLine]]:
    if f.forced:
        return "tcp_deliberate", lines + f.forced
    if f.strong or rdma:
        return "tcp_silent_fallback", lines + list(rdma) + f.strong[:3] + f.weak[:1]
    return "tcp_no_rdma", lines + f.weak[:1]


def _lines(recs: list[Record], n: int) -> list[EvidenceLine]:
    """At most ``n`` lines: the first of each host first (a line from every node proves more), each message
    once (many ranks print the same one)."""
    first = list({r.host: r for r in reversed(recs)}.values())[::-1]
    seen, out = set(), []
    for r in sorted(first, key=lambda r: (r.file, r.line)) + recs:
        key = r.text.split(" NCCL ", 1)[-1]
        if key not in seen:
            seen.add(key)
            out.append(_line(r))
    return out[:n]


def communicator(g: Group, f: Facts) -> tuple[Communicator, list[EvidenceLine], bool | None]:
    multi = multi_node(g.records, f)
    verdict, evidence = decide(g.records, f, multi)
    recs = g.records
    conns = [r for r in recs if r.kind == K.CONN]
    net = [r for r in conns if r.data["transport"] in ("NET", "COLLNET")]
    comm = [r for r in recs if r.kind == K.COMM]
    ranks = {r.data["rank"] for r in comm} | {_own_rank(r) for r in conns}
    nodes = [r.data["nnodes"] for r in comm if r.data.get("nnodes")]
    names = [r.data["name"] for r in recs if r.kind == K.NET] + [r.data.get("net", "COLLNET") for r in net]
    plugins = [r.data["name"] for r in recs if r.kind in (K.PLUGIN_ASSIGNED, K.PLUGIN_LOADED) and "name" in r.data]
    devices = [d for r in recs if r.kind == K.IB for d in r.data["devices"]]
    devices += [i for r in recs if r.kind == K.SOCKET for i in r.data["interfaces"]]
    counts: dict[str, int] = {}
    for r in conns:
        counts[r.data["label"]] = counts.get(r.data["label"], 0) + r.count
    return Communicator(
        id=g.id, ranks=sorted(ranks), hosts=sorted({r.host for r in recs if r.host}),
        n_nodes=max(nodes) if nodes else None, net=names[-1] if names else None,
        plugin=plugins[-1] if plugins else None, devices=list(dict.fromkeys(devices)),
        gdr=all(r.data["gdr"] for r in net) if net else None, connections=counts, verdict=verdict), evidence, multi


# ------------------------------------------------------------------------------------------------- verdict

def analyze(logs: list[NcclLog], env: list[EnvSetting], rows: list[transport_bw.Row], th: Thresholds,
            source: str = "comm-table") -> tuple[Transport | None, Finding | None]:
    """The run's transport and its finding, from the logs, the recorded settings and bandwidth rows
    (``source``: where the rows come from); (None, None) without NCCL lines and without inter-node
    bandwidth evidence."""
    logs = [log for log in logs if log.nccl_lines]
    f = facts(logs, env)
    comms, evidence, multis = [], [], []
    for g in groups(logs) if logs else []:
        c, ev, multi = communicator(g, f)
        comms.append(c)
        evidence.append(ev)
        multis.append(multi)
    if comms:
        worst = min(range(len(comms)), key=lambda i: PRIORITY.index(comms[i].verdict))
        verdict, lines = comms[worst].verdict, evidence[worst]
    else:
        verdict, lines = "unknown", []
    multi = True if True in multis else (False if multis and all(m is False for m in multis) else None)
    if multi is None and f.world[0] and f.world[1]:
        multi = f.world[0] > f.world[1]
    local = [r.data["local_ranks"] for log in logs for r in log.records
             if r.kind == K.COMM and r.data.get("local_ranks")]
    local_ranks = max(local) if local else f.world[1]
    bandwidth = transport_bw.check(transport_bw.placed(rows, multi, local_ranks), th, source)
    if not logs and bandwidth is None:
        return None, None
    disagree = bandwidth is not None and bandwidth.range == "tcp" and verdict in RDMA
    if verdict in ("unknown", "inconclusive") and bandwidth is not None and bandwidth.range == "tcp":
        verdict = "tcp_suspected"
    severity = "warning" if disagree else SEVERITY.get(verdict, "info")
    lines = _dedupe(lines)[:MOST_EVIDENCE]
    version = ".".join(map(str, f.version)) if f.version else None
    transport = Transport(verdict=verdict, severity=severity, multi_node=multi, nccl_version=version,
                          communicators=comms, env=dict(sorted(f.env.items())), evidence=lines,
                          bandwidth=bandwidth, logs=len(logs))
    if verdict == "unknown" and severity == "info":
        return transport, None          # bandwidth without logs, and nothing in it to report
    return transport, _finding(transport, f, logs, disagree)


def _finding(t: Transport, f: Facts, logs: list[NcclLog], disagree: bool) -> Finding:
    """The nccl-transport finding: its rank is the lowest rank the evidence lines name (-1: none)."""
    ranks = [f.ranks[p] for p in _processes(t.evidence, logs) if p in f.ranks]
    nets = [c.net for c in t.communicators if c.verdict == t.verdict and c.net]
    bw = t.bandwidth
    return Finding(id="nccl-transport", severity=t.severity, rank=min(ranks) if ranks else -1, step=None,
                   verdict=t.verdict, evidence={
                       "verdict": t.verdict, "multi_node": t.multi_node, "nccl_version": t.nccl_version,
                       "net": nets[0] if nets else None, "communicators": len(t.communicators), "logs": t.logs,
                       "lines": [{"file": e.file, "line": e.line, "text": e.text} for e in t.evidence],
                       "forced_by": f.forced_by,
                       "bandwidth": None if bw is None else {
                           "p50_gbps": bw.busbw_gbps_p50, "collectives": bw.collectives, "range": bw.range,
                           "tcp_max_gbps": bw.tcp_max_gbps, "rdma_min_gbps": bw.rdma_min_gbps},
                       "bandwidth_disagrees": disagree})


def _dedupe(lines: list[EvidenceLine]) -> list[EvidenceLine]:
    return list({(e.file, e.line, e.text): e for e in lines}.values())


def _processes(lines: list[EvidenceLine], logs: list[NcclLog]) -> list[tuple]:
    at = {(r.file, r.line): r.process for log in logs for r in log.records}
    return [at[(e.file, e.line)] for e in lines if (e.file, e.line) in at]
