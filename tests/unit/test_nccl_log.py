"""The NCCL log parser on hand-written lines: prefixes, every line kind, and damaged files (CRLF, a last line
cut short, bytes that are not UTF-8, binary files, files without NCCL lines). Expected values are the
lines' own text."""

from __future__ import annotations

import pytest

from tracelens.model import nccl_records as K
from tracelens.parsers import discover
from tracelens.parsers.nccl import debug_log as nccl_log, detect
from tracelens.errors import UsageError

P = "gpu-a:4242:4250 [3] NCCL INFO "


def one(text):
    rec = nccl_log.parse_line(text, "x.log", 7)
    assert rec is not None
    return rec


@pytest.mark.parametrize("line, kind, data", [
    (P + "NCCL version 2.30.1+cuda13.0", K.VERSION, {"version": (2, 30, 1)}),
    (P + "Using network IBext_v8", K.NET, {"name": "IBext_v8"}),
    (P + "NET/Socket : Using [0]eth0:10.0.0.1<0> [1]ib0:10.1.0.1<0>", K.SOCKET, {"interfaces": ["eth0", "ib0"]}),
    (P + "Bootstrap: Using ibs85f0:10.2.0.1<0>", K.BOOTSTRAP, {"interfaces": ["ibs85f0"]}),     # 2.25+ wording
    (P + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>", K.IB,
     {"devices": ["mlx5_0", "mlx5_1"], "links": ["IB", "RoCE"]}),
    (P + "NET/IB : No device found.", K.NO_IB, {}),
    (P + "Count not open libibverbs.so.1", K.VERBS_FAIL, {"name": "libibverbs.so.1"}),          # 2.30 typo
    ("gpu-a:4242:4250 [3] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]", K.VERBS_FAIL,
     {"name": "libibverbs.so[.1]"}),
    (P + "Failed to initialize NET plugin IB", K.PLUGIN_INIT_FAIL, {"name": "IB"}),
    (P + "Initialized NET plugin Socket", K.PLUGIN_INIT, {"name": "Socket"}),
    (P + "Assigned NET plugin Socket to comm", K.PLUGIN_ASSIGNED, {"name": "Socket"}),
    (P + "NET/Plugin: Could not find: libnccl-net.so.", K.PLUGIN_MISSING, {"name": "libnccl-net.so"}),
    (P + "NET/Plugin : Plugin load (libnccl-net-ofi.so) returned 2 : libnccl-net-ofi.so: cannot open shared "
         "object file", K.PLUGIN_MISSING, {"name": "libnccl-net-ofi.so"}),
    (P + "NET/OFI Selected Provider is efa (found 4 nics)", K.OFI, {"name": "efa"}),
    (P + "NCCL_IB_DISABLE set by environment to 1.", K.ENV, {"name": "NCCL_IB_DISABLE", "value": "1"}),
    (P + "NCCL_IB_HCA set to mlx5_0,mlx5_1", K.ENV, {"name": "NCCL_IB_HCA", "value": "mlx5_0,mlx5_1"}),
    (P + "Comm config netName reset to NCCL_NET=Socket", K.ENV, {"name": "NCCL_NET", "value": "Socket"}),
    (P + "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'", K.GDR_HCA,
     {"net": "IB", "enabled": True, "hca": "mlx5_0"}),
    (P + "comm 0x5581ab rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0", K.COMM,
     {"comm": "0x5581ab", "rank": 3, "nranks": 16, "nnodes": 2, "local_ranks": 8}),
    (P + "ncclCommInitRankConfig comm 0x5581ab rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 1b000 commId "
         "0x9f3a21c4 - Init START", K.COMM, {"comm": "0x5581ab", "rank": 3, "nranks": 16, "comm_id": "0x9f3a21c4"}),
])
def test_every_line_kind(line, kind, data):
    rec = one(line)
    assert (rec.kind, rec.host, rec.pid, rec.device) == (kind, "gpu-a", "4242", 3)
    assert rec.data == data and (rec.file, rec.line, rec.text) == ("x.log", 7, line)


@pytest.mark.parametrize("via, transport, net, gdr, label", [
    ("NET/IB/3(2)/GDRDMA", "NET", "IB", True, "NET/IB"),                 # proxy variant
    ("NET/IB/0/GDRDMA(PCI)/Shared", "NET", "IB", True, "NET/IB"),
    ("NET/Socket/1", "NET", "Socket", False, "NET/Socket"),
    ("P2P/CUMEM/read", "P2P", None, None, "P2P/CUMEM"),
    ("P2P/MNNVL", "P2P", None, None, "P2P/MNNVL"),
    ("SHM/direct", "SHM", None, None, "SHM"),                              # HEAD after 2.30
    ("direct shared memory", "SHM", None, None, "SHM"),                    # <= 2.12
])
def test_connection_lines(via, transport, net, gdr, label):
    rec = one(f"{P}Channel 02/1 : 3[3] -> 11[3] [send] via {via}")
    assert rec.kind == K.CONN
    assert (rec.data["transport"], rec.data.get("net"), rec.data.get("gdr"), rec.data["label"]) == \
        (transport, net, gdr, label)
    assert (rec.data["from"], rec.data["to"]) == (3, 11)


def test_prefixes_of_launchers_and_timestamps():
    # mpirun's [1,7]<stdout>:, a launcher's "[0] ", a timestamp: the host:pid:tid [dev] in front of the marker.
    for line in ("[1,7]<stdout>:node-7:21471:22316 [7] NCCL INFO Using network IB",
                 "[0] node-7:21471:22316 [7] NCCL INFO Using network IB",
                 "[2026-11-23 10:00:01] node-7:21471:22316 [7] NCCL INFO Using network IB"):
        rec = one(line)
        assert (rec.kind, rec.host, rec.pid, rec.device) == (K.NET, "node-7", "21471", 7)
    assert one("NCCL INFO Using network IB").pid is None          # no prefix: the file is the process


def test_quoted_log_lines_are_not_log_lines():
    # A document about NCCL logs (a README, an issue copied to Markdown) quotes the marker: not a log line.
    assert nccl_log.parse_line('| `x.log` | `NCCL INFO NET/IB : No device found` |') is None
    assert nccl_log.parse_line("nothing NCCL here") is None


def test_interleaved_ranks_crlf_and_a_cut_last_line(tmp_path):
    log = tmp_path / "all.log"
    lines = ["h1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA",
             "some application output",
             "h2:20:21 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA",
             "h1:10:11 [0] NCCL INFO Connected all rings"]
    log.write_bytes(("\r\n".join(lines) + "\r\nh2:20:21 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [send] via NET/I")
                    .encode())
    parsed = nccl_log.parse(log)
    # 3 NCCL lines with a line end (the application line is not one), the cut fifth line left out.
    assert (parsed.nccl_lines, parsed.truncated, parsed.replaced) == (3, True, 0)
    assert [(r.line, r.host, r.kind) for r in parsed.records] == [(1, "h1", K.CONN), (3, "h2", K.CONN)]
    assert parsed.records[0].text == lines[0]                     # no \r left on the text


def test_bytes_that_are_not_utf8_are_counted(tmp_path):
    log = tmp_path / "latin.log"
    log.write_bytes(b"h\xe9te:1:2 [0] NCCL INFO Using network Socket\n"
                    b"h1:1:2 [0] NCCL INFO NET/Socket : Using [0]eth\xff\xfe0:10.0.0.1<0>\n"
                    + "h1:1:2 [0] NCCL INFO real \ufffd stays\n".encode())
    parsed = nccl_log.parse(log)
    assert parsed.replaced == 3                                   # \xe9, \xff, \xfe; the real U+FFFD is not
    assert [r.kind for r in parsed.records] == [K.NET, K.SOCKET]
    assert parsed.records[0].host == "h\ufffdte"


def test_binary_and_empty_files_have_no_nccl_lines(tmp_path):
    (tmp_path / "core.log").write_bytes(b"\x7fELF\x00\x00NCCL INFO Using network IB\n")
    (tmp_path / "empty.log").write_bytes(b"")
    assert nccl_log.parse(tmp_path / "core.log").nccl_lines == 0
    assert [detect.sniff(tmp_path / n) for n in ("core.log", "empty.log")] == ["binary", "empty"]


def test_discover_finds_logs_by_content(tmp_path):
    run = tmp_path / "run"
    (run / "nccl").mkdir(parents=True)
    (run / "nccl" / "h1.10.log").write_text(P + "Using network IB\n")
    (run / "nccl" / "h1.11.log").write_text("no nccl here\n")          # in nccl/: skipped, with a reason
    (run / "stdout.txt").write_text("step 1\n" + P + "Using network IB\n")   # any name, found by content
    (run / "README").write_text("notes\n")                             # neither: left alone
    (run / "model.pt").write_text(P + "Using network IB\n")           # not a text log's name: never read
    found = discover([str(run)])
    assert list(found) == [] and sorted(p.name for p in found.nccl_logs) == ["h1.10.log", "stdout.txt"]
    assert [(p.name, why) for p, why in found.logs_skipped] == [("h1.11.log", "no NCCL lines")]


def test_a_named_log_without_nccl_lines_alone_is_a_usage_error(tmp_path):
    (tmp_path / "job.log").write_text("epoch 1 loss 0.3\n")
    with pytest.raises(UsageError, match=r"no trace files found .* and no NCCL log.*job.log \(no NCCL lines\)"):
        discover([str(tmp_path / "job.log")])


def test_inputs_count_what_could_not_be_read(tmp_path):
    good = tmp_path / "a.log"
    good.write_bytes(P.encode() + b"Using network \xffIB\n" + P.encode() + b"Using net")
    bad = tmp_path / "b.log"
    bad.write_text("nothing\n")
    nccl = nccl_log.inputs([good], [(bad, "no NCCL lines")])
    assert [log.path for log in nccl.logs] == [str(good)]
    assert [(code, n) for code, n, _ in nccl.notes] == [("nccl-log-skipped", 1), ("nccl-log-undecodable", 1),
                                                        ("nccl-log-truncated", 1)]
