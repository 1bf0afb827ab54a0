"""What the text and Markdown reports show of the Report: each key they format is checked against the
Report's own value (the renderers format, they never compute)."""

from __future__ import annotations

import re

import pytest

import tracelens
from tracelens.renderers import render
from tracelens.contract import RankResult, Report, StepMetrics, Summary, Totals

from conftest import SAMPLES, host, kernel, write_trace
from fixtures import synth

WIDTHS = (80, 120)


def report(path):
    return tracelens.analyze(tracelens.load(str(path)))


def text(rep, width: int = 80) -> str:
    return render(rep, "text", width=width)


def markdown(rep) -> str:
    return render(rep, "markdown")


def finding_lines(rep, id_: str) -> tuple[list[str], list[str]]:
    """The heading line of every finding with this id, in the text (80 and 120 columns; a heading may wrap,
    its start does not) and the Markdown."""
    starts = [d.title[:12] for d in rep.diagnoses if d.id == id_]
    assert starts, f"no {id_} finding in the report"
    texts = [line for w in WIDTHS for line in text(rep, w).splitlines()
             if line.startswith(("INFO ", "WARNING ", "CRITICAL ")) and any(f" · {t}" in line for t in starts)]
    mds = [line for line in markdown(rep).splitlines()
           if line.startswith("- ") and any(f" · **{t}" in line for t in starts)]
    return texts, mds


# ------------------------------------------------------------------------ findings without a step


def test_straggler_is_labelled_across_ranks():
    # The straggler sample: rank 3 runs its compute 1.3x slower (generator); the finding compares it with
    # the other ranks, so it has no step although every rank has steps 2-4.
    rep = report(SAMPLES / "straggler")
    (d,) = [d for d in rep.diagnoses if d.id == "straggler"]
    assert d.step is None and d.rank == 3 and [s.step for s in rep.ranks[3].steps] == [2, 3, 4]
    texts, mds = finding_lines(rep, "straggler")
    assert len(texts) == 2 and len(mds) == 1
    # Rank 3 arrives last at every all-reduce and computes slower: the title names the cause.
    assert all(line.startswith("WARNING rank 3 · across ranks · straggler (slower compute): ") for line in texts), texts
    assert mds[0].startswith("- ⚠️ **warning** · rank 3 · across ranks · **straggler (slower compute): "), mds
    assert "whole trace" not in text(rep) and "whole trace" not in markdown(rep)


def _nccl_cpu_only(path, steps: bool):
    # A DDP step recorded with CPU activity only: torch's nccl:all_reduce scopes, no kernel anywhere.
    step = [host("ProfilerStep#3", 0, 1000, cat="user_annotation")] if steps else []
    return write_trace(path, step + [
        host("aten::mm", 10, 400), host("nccl:all_reduce", 500, 20, cat="user_annotation"),
        host("nccl:all_reduce", 600, 20, cat="user_annotation")],
        deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])


@pytest.mark.parametrize("steps, label", [(True, "whole rank"), (False, "whole trace")])
def test_no_gpu_activity_is_labelled_by_the_ranks_steps(tmp_path, steps, label):
    # With ProfilerStep#3 the rank has step 3, and the finding (step null) is about the whole rank, not a
    # trace without steps; without any ProfilerStep the one window is the whole trace.
    rep = report(_nccl_cpu_only(tmp_path / "rank0.json", steps))
    (d,) = [d for d in rep.diagnoses if d.id == "no-gpu-activity"]
    assert d.step is None
    assert [s.step for s in rep.ranks[0].steps] == ([3] if steps else [None])
    texts, mds = finding_lines(rep, "no-gpu-activity")
    assert texts and all(line.startswith(f"WARNING rank 0 · {label} · no GPU activity") for line in texts), texts
    assert mds and all(f"· rank 0 · {label} · **no GPU activity" in line for line in mds), mds


def test_findings_of_a_trace_without_steps_say_whole_trace(tmp_path):
    # No ProfilerStep: one window (step null). A 1 ms GEMM, then a 1 ms all-reduce alone after it: two-phase
    # with 1 ms exposed; its overlap-pattern finding covers the whole trace.
    path = write_trace(tmp_path / "rank0.json", [
        kernel("sm90_gemm", 0, 1000), kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1000, 1000, stream=13)])
    rep = report(path)
    (d,) = [d for d in rep.diagnoses if d.id == "overlap-pattern"]
    assert d.step is None and [s.step for s in rep.ranks[0].steps] == [None]
    texts, mds = finding_lines(rep, "overlap-pattern")
    assert texts and all(" rank 0 · whole trace · " in line for line in texts), texts
    assert mds and all(" rank 0 · whole trace · " in line for line in mds), mds


# ------------------------------------------------------------------------ a mixed pattern's counts

MS = 1_000_000


def _step(step: int, pattern: str) -> StepMetrics:
    # A 10 ms step with 4 ms compute and 2 ms comm, 1 ms of it hidden; only its pattern matters here.
    return StepMetrics(step=step, start_ns=step * 10 * MS, end_ns=(step + 1) * 10 * MS, duration_ns=10 * MS,
                       compute_ns=4 * MS, comm_ns=2 * MS, overlap_ns=1 * MS, exposed_comm_ns=1 * MS, idle_ns=5 * MS,
                       overlap_pct=50.0, exposed_comm_fraction=0.1, pattern=pattern)


def _rank(rank: int, patterns: list[str], pattern: str, counts: dict[str, int]) -> RankResult:
    steps = [_step(k, p) for k, p in enumerate(patterns, start=2)]
    n = len(steps)
    totals = Totals(duration_ns=10 * MS * n, compute_ns=4 * MS * n, comm_ns=2 * MS * n, overlap_ns=MS * n,
                    exposed_comm_ns=MS * n, idle_ns=5 * MS * n, overlap_pct=50.0, exposed_comm_fraction=0.1)
    return RankResult(rank=rank, world_size=3, device=rank, device_name=None, mode="gpu", source=f"rank{rank}.json",
                      steps=steps, totals=totals, pattern=pattern, pattern_counts=counts)


def mixed_report() -> Report:
    """Three ranks of four steps. The patterns and their counts follow docs/metrics.md by hand: rank 0 has
    two-phase in 2 of 4 steps, not a strict majority -> mixed (counts in order of first appearance, as the
    analyzer writes them); ranks 1 and 2 hold one pattern in every step; the run's ranks are mixed, sawtooth
    and two-phase, one each, no strict majority -> mixed."""
    ranks = [_rank(0, ["sawtooth", "two-phase", "partial", "two-phase"], "mixed",
                   {"sawtooth": 1, "two-phase": 2, "partial": 1}),
             _rank(1, ["sawtooth"] * 4, "sawtooth", {"sawtooth": 4}),
             _rank(2, ["two-phase"] * 4, "two-phase", {"two-phase": 4})]
    summary = Summary(ranks=3, steps=4, overlap_pct=50.0, exposed_comm_fraction=0.1, worst_rank=0,
                      comm_ns=24 * MS, exposed_comm_ns=12 * MS, pattern="mixed",
                      pattern_counts={"mixed": 1, "sawtooth": 1, "two-phase": 1})
    return Report(inputs=[], ranks=ranks, summary=summary, collectives=[])


# Most first; equal counts keep the report's order.
RANK0 = "mixed (steps: two-phase 2, sawtooth 1, partial 1)"
RUN = "mixed (ranks: mixed 1, sawtooth 1, two-phase 1)"


# At 120 columns the step table has its pattern column: the line under it gives the mixed rank's counts. At
# 80 (tight layout: the idle column's 20.000 leaves no room for it) the line also gives the steps of each
# pattern, as built: steps 2-5.
UNDER_TABLE = {120: f"pattern: {RANK0}",
               80: f"pattern: {RANK0} — sawtooth in step 2; two-phase in steps 3, 5; partial in step 4"}


@pytest.mark.parametrize("width", WIDTHS)
def test_text_says_the_counts_of_a_mixed_pattern(width):
    out = text(mixed_report(), width)
    lines = out.splitlines()
    assert max(map(len, lines)) <= width
    assert any("pattern" in line for line in lines[1:5]) == (width == 120)   # the header has the column
    flat = " ".join(lines)                                           # lines may wrap
    assert f"pattern {RUN}" in flat                                  # the summary
    assert flat.count("pattern: mixed") == 1, out                    # rank 0 only: ranks 1 and 2 are not mixed
    assert UNDER_TABLE[width] in flat
    # Under rank 0's table, before rank 1's title.
    assert flat.index(UNDER_TABLE[width]) < flat.index("rank 1/3")


def test_markdown_says_the_counts_of_a_mixed_pattern():
    md = markdown(mixed_report())
    assert f"pattern **mixed** {RUN.removeprefix('mixed ')}." in md
    assert md.count("Pattern **mixed** (steps:") == 1 and f"Pattern **mixed** {RANK0.removeprefix('mixed ')}." in md
    # The line follows rank 0's table, before rank 1's heading.
    assert md.index("Pattern **mixed**") < md.index("## rank 1/3")


# ------------------------------------------------------------------------ work launched before the capture


def _rank_blocks(out: str, ranks: int) -> list[str]:
    """The text of each rank's section: from its title to the next rank's title (or what follows the last)."""
    lines = out.splitlines()
    starts = [next(i for i, line in enumerate(lines) if line.startswith(f"rank {r}/")) for r in range(ranks)]
    end = next(i for i, line in enumerate(lines) if i > starts[-1] and line.startswith(
        ("most exposed", "diagnoses", "summary")))
    return ["\n".join(lines[a:b]) for a, b in zip(starts, starts[1:] + [end])]


@pytest.mark.parametrize("name", ["gpu_behind_1", "gpu_behind_2"])
def test_pre_capture_line_has_the_generator_truth(tmp_path, name):
    sc = synth.SCENARIOS[name]
    synth.write(sc, tmp_path / name)
    rep = report(tmp_path / name)
    truth = synth.pre_capture_truth(sc)
    # Generator truth: the CPU runs 1 (2) steps ahead, so the device still runs 1 (2) earlier steps when the
    # capture opens: 13 (26) kernels, 6.7 (13.4) ms busy of which 1.6 (3.2) ms all-reduce, no copies.
    want = {r: f"pre-capture (in no step): {t['kernels']} kernels, {t['busy_ns'] / 1e6:.3f} ms busy "
               f"({t['comm_ns'] / 1e6:.3f} ms comm)" for r, t in truth.items()}
    assert want[0] == {"gpu_behind_1": "pre-capture (in no step): 13 kernels, 6.700 ms busy (1.600 ms comm)",
                       "gpu_behind_2": "pre-capture (in no step): 26 kernels, 13.400 ms busy (3.200 ms comm)"}[name]
    for width in WIDTHS:
        out = text(rep, width)
        assert max(map(len, out.splitlines())) <= width
        assert out.count("pre-capture (") == sc.ranks
        for r, block in enumerate(_rank_blocks(out, sc.ranks)):      # once per rank, under its own table
            assert block.splitlines().count(want[r]) == 1, block
    sections = markdown(rep).split("\n## ")                         # Markdown: in each rank's own section
    for r in range(sc.ranks):
        (section,) = [sec for sec in sections if sec.startswith(f"rank {r}/")]
        assert section.splitlines().count("P" + want[r][1:] + ".") == 1, section


def test_pre_capture_line_of_a_real_recording():
    # A real H100 recording (sample_traces/cuda_nccl_ddp): the warning counts 30 device activities launched
    # before the capture; the line shows how the Report splits them (kernels, copies) and its busy and copy
    # time, rounded to the step table's 3 decimals of a ms; no comm (world size 1: no NCCL kernel ran).
    rep = report(SAMPLES / "cuda_nccl_ddp")
    (w,) = [w for w in rep.warnings if w.code == "launched-before-capture"]
    pc = rep.ranks[0].pre_capture
    assert pc.kernels + pc.copies == w.count == 30 and pc.comm_ns == 0 and pc.copy_ns > 0
    want = (f"pre-capture (in no step): {pc.kernels} kernels, {pc.copies} copies, {pc.busy_ns / 1e6:.3f} ms busy "
            f"({pc.copy_ns / 1e6:.3f} ms copy)")
    for width in WIDTHS:
        out = text(rep, width)
        assert want in out.splitlines() and len(want) <= 80
    assert "P" + want[1:] + "." in markdown(rep).splitlines()


def test_pre_capture_of_a_trace_without_steps_is_in_its_window(tmp_path):
    # No ProfilerStep: the one window spans the whole capture and holds the pre-capture work too. Raw events:
    # a GEMM [0, 100) µs and an all-reduce [50, 150) µs with correlation ids 1 and 2, below the only recorded
    # launch's (5): launched before the capture. Busy: [0, 150) = 0.150 ms; comm 0.100 ms.
    path = write_trace(tmp_path / "rank0.json", [
        kernel("sm90_gemm", 0, 100, corr=1),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50, 100, stream=13, corr=2),
        host("cudaLaunchKernel", 200, 5, cat="cuda_runtime", correlation=5), kernel("sm90_gemm", 210, 100, corr=5)])
    rep = report(path)
    assert [s.step for s in rep.ranks[0].steps] == [None] and rep.ranks[0].pre_capture is not None
    # Its title says "the whole capture as one step"; the line says the work is in that step, in those words.
    want = "pre-capture (in the one step): 2 kernels, 0.150 ms busy (0.100 ms comm)"
    assert "the whole capture as one step" in text(rep, 120)
    assert want in text(rep, 120).splitlines()
    assert "P" + want[1:] + "." in markdown(rep).splitlines()


def test_no_pre_capture_line_without_pre_capture_work():
    # wfbp_100 (generator, no GPU lag): every kernel is launched inside the capture.
    rep = report(SAMPLES / "wfbp_100")
    assert all(r.pre_capture is None for r in rep.ranks)
    assert "pre-capture (" not in text(rep) and "Pre-capture (" not in markdown(rep)


def test_a_run_without_communication_has_no_table_across_ranks(tmp_path):
    # Two ranks of one world, each a step with one 0.5 ms GEMM and no collective: the Report has its
    # cross-rank part (nothing matched, nothing unmatched), but a table of zero waits and transfers would say
    # nothing; the straggler sample, with its matched all-reduces, keeps the table.
    for r in (0, 1):
        write_trace(tmp_path / f"rank{r}.json", [
            host("ProfilerStep#1", 0, 1000, cat="user_annotation"),
            host("cudaLaunchKernel", 10, 5, cat="cuda_runtime", correlation=1), kernel("sm90_gemm", 20, 500, corr=1)],
            distributedInfo={"rank": r, "world_size": 2, "backend": "nccl"})
    rep = report(tmp_path)
    m = rep.cross_rank.matching
    assert rep.summary.ranks == 2 and rep.summary.comm_ns == 0 and (m.matched, m.unmatched) == (0, 0)
    assert all("across ranks" not in text(rep, w) for w in WIDTHS) and "## Across ranks" not in markdown(rep)
    rep = report(SAMPLES / "straggler")
    assert all("across ranks\n" in text(rep, w) for w in WIDTHS) and "## Across ranks" in markdown(rep)


def _md_alignments(md: str) -> dict[str, dict[str, str]]:
    """Each Markdown table's alignment of its columns, by its first header: {header: "left" or "right"}."""
    lines = md.splitlines()
    out = {}
    for i, line in enumerate(lines[:-1]):
        rule = lines[i + 1]
        if line.startswith("| ") and re.fullmatch(r"\|(-{3}:?\|)+", rule):
            heads = [h.strip() for h in line.strip("|").split("|")]
            marks = rule.strip("|").split("|")
            out.setdefault(heads[0], dict(zip(heads, ("right" if m.endswith(":") else "left" for m in marks))))
    return out


def test_markdown_aligns_words_left_and_numbers_right():
    # The straggler sample's Markdown: the verdict's cause, ranks ("0–2 (3 of 4)") and why ("waiting for rank
    # 3: slower compute") are words, its costs numbers; so are a step's pattern and a collective's kernel.
    tables = _md_alignments(markdown(report(SAMPLES / "straggler")))
    assert tables["cause"] == {"cause": "left", "ms per step": "right", "of step": "right", "fixing saves": "right",
                               "ranks": "left", "why": "left"}
    assert tables["step"]["pattern"] == "left" and tables["step"]["duration ms"] == "right"
    assert tables["rank"]["kernel"] == "left" and tables["rank"]["exposed ms"] == "right"


def test_the_network_transport_section_shows_the_reports_transport():
    from tracelens.contract import BandwidthCheck, Communicator, EvidenceLine, Transport

    # Hand-made: every value distinct, each one looked for where the section prints it.
    t = Transport(verdict="tcp_silent_fallback", severity="critical", multi_node=True, nccl_version="2.27.3",
                  communicators=[Communicator(id="0x9f3a", ranks=[0, 1, 2, 3], hosts=["h1", "h2"], n_nodes=2,
                                              net="Socket", plugin="Socket", devices=["eth0"], gdr=None,
                                              connections={"NET/Socket": 6, "P2P/IPC": 4},
                                              verdict="tcp_silent_fallback")],
                  env={"NCCL_IB_HCA": "mlx5_0"}, logs=2,
                  evidence=[EvidenceLine(file="nccl/h1.100.log", line=9,
                                         text="h1:100:101 [0] NCCL INFO Using network Socket"),
                            EvidenceLine(file="run/manifest.json", line=None, text="NCCL_IB_HCA=mlx5_0")],
                  bandwidth=BandwidthCheck(source="comm-table", collectives=7, busbw_gbps_p10=1.25, busbw_gbps_p50=2.5,
                                           busbw_gbps_p90=3.75, range="tcp", tcp_max_gbps=5.0, rdma_min_gbps=15.0))
    rep = Report(inputs=[], ranks=[], collectives=[], transport=t,
                 summary=Summary(ranks=0, steps=0, overlap_pct=None, exposed_comm_fraction=None, worst_rank=None))
    section = ["network transport: tcp_silent_fallback (critical · NCCL 2.27.3 (from its log) · multi-node · 2 NCCL "
               "logs)",
               "0x9f3a: ranks 0-3 on 2 hosts, 2 nodes, net Socket, plugin Socket; NET/Socket 6, P2P/IPC 4 -> "
               "tcp_silent_fallback", "recorded settings: NCCL_IB_HCA=mlx5_0",
               "inter-node busbw p50 2.50 GB/s (p10 1.25, p90 3.75) over 7 collectives: TCP range (below 5 GB/s)",
               # each file once, then its lines (line number, text); a recorded setting has no line
               "nccl/h1.100.log", "9  h1:100:101 [0] NCCL INFO Using network Socket",
               "run/manifest.json", "-  NCCL_IB_HCA=mlx5_0"]
    shown = [line.strip() for line in text(rep, 200).splitlines()]
    assert all(line in shown for line in section), shown
    assert "summary: no traces; the network transport from NCCL logs alone" in shown
    md = markdown(rep)
    assert "## Network transport" in md and "**tcp_silent_fallback** (critical · NCCL 2.27.3 (from its log)" in md
    assert "- `nccl/h1.100.log:9`: `h1:100:101 [0] NCCL INFO Using network Socket`" in md
    assert "**No traces**" in md
    # Without a transport (no logs, no inter-node bandwidth) there is no section.
    assert "network transport" not in text(report(SAMPLES / "wfbp_100"))


# ------------------------------------------------------------------------------------- overlap tax

def _taxed_report(compared: int, uncompared: int, varying: int = 0, low: int = 0, high: int = 0) -> Report:
    rep = mixed_report()
    t = rep.ranks[0].totals
    # Values distinct from everything else in the report, so a line can only have them from these keys.
    t.overlap_tax_ns, t.effective_exposed_ns = 1_234_000, 5_678_000
    t.overlap_tax_compared, t.overlap_tax_uncompared, t.overlap_tax_varying = compared, uncompared, varying
    t.overlap_tax_low_ns, t.overlap_tax_high_ns = low, high
    return rep


@pytest.mark.parametrize("width", WIDTHS)
def test_text_and_markdown_show_the_ranks_overlap_tax(width):
    rep = _taxed_report(17, 9)
    line = ("overlap tax: 1.234 ms (17 kernels under communication compared with their runs alone, 9 without "
            "enough of them); effective exposed comm 5.678 ms")
    assert line in " ".join(text(rep, width).split("\n"))       # text wraps it at the width
    assert all(len(x) <= width for x in text(rep, width).splitlines())
    assert "Overlap tax: 1.234 ms (17 kernels" in markdown(rep)
    # Every overlapped kernel compared: the rest is not mentioned; no kernel under communication: no line.
    assert "without enough" not in text(_taxed_report(17, 0), width)
    assert "overlap tax" not in text(_taxed_report(0, 0), width).lower()
    # Kernels under communication but none compared (each ran once alone at most): nothing was measured.
    assert "overlap tax" not in text(_taxed_report(0, 9), width).lower()
    assert "overlap tax" not in markdown(_taxed_report(0, 9)).lower()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_tax_line_gives_the_interval_and_the_kernels_whose_work_varies(width):
    rep = _taxed_report(17, 9, varying=5, low=1_012_000, high=2_345_000)
    line = ("overlap tax: 1.234 ms (interval 1.012-2.345 ms; 17 kernels under communication compared with their "
            "runs alone, 9 without enough of them, 5 whose work varies); effective exposed comm 5.678 ms")
    assert line in " ".join(text(rep, width).split("\n"))
    assert "(interval 1.012-2.345 ms; 17 kernels" in markdown(rep)


def test_sizes_are_iec_in_every_table():
    # wfbp_100's generator (tests/fixtures/synth/scenarios.py): every all-reduce moves bucket_bytes = 25 * 2**20
    # bytes. The exposed-collectives table and the bandwidth table name that size in the same units, IEC
    # (docs/metrics.md, "Units"): 25.0 MiB, the one size seen in the 16 MiB–256 MiB bucket (so the bucket's
    # edges are not printed); no decimal MB anywhere.
    from tracelens.renderers.common import size

    assert [size(n) for n in (None, 0, 1023, 1024, 25 * 2**20, 3 * 2**30 // 2, 2**40)] == \
        ["?", "0 B", "1023 B", "1.0 KiB", "25.0 MiB", "1.5 GiB", "1.0 TiB"]
    rep = report(SAMPLES / "wfbp_100")
    assert {c.bytes for c in rep.collectives} == {25 * 2**20}
    for out in (text(rep, 160), markdown(rep)):
        assert "25.0 MiB" in out and "16 MiB–256 MiB" not in out
        assert not re.search(r"\d (kB|MB|GB)\b", out), out


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_a_quantity_reads_the_same_in_the_tables_and_the_sentences(fmt):
    # wfbp_100 generator truth per step: 12 ms of comm, 9.9 ms of it hidden (82.5 %), 2.1 ms exposed of a
    # 16.47 ms step (12.8 %). The step table and the sawtooth finding beside it give each with the same digits
    # and unit; rank 1's clock offset (+0.123 ms, spread 0) is in ms in the table and in the sentence alike.
    from tracelens.renderers.common import frac, ms, pct

    rep = report(SAMPLES / "wfbp_100")
    st = rep.ranks[0].steps[0]
    assert (pct(st.overlap_pct), frac(st.exposed_comm_fraction), ms(st.exposed_comm_ns)) == ("82.5 %", "12.8 %", "2.100")
    out = text(rep, 160) if fmt == "text" else markdown(rep)
    assert "82.5 % of their time is hidden" in out and "2.100 ms exposed (12.8 % of the step)" in out
    assert "rank 1 +0.123 ms ± 0.000 ms" in out and "µs" not in out
    # No shorter roundings of the same numbers (82 %, 13 % of the step, 2.10 ms) anywhere, the run verdict's
    # cost per step included (2.100 ms, 12.8 %: metrics.md §6, one rank's step).
    assert not re.search(r"\b82 %|\b13 % of the step|\b2\.10 ms", out), out
    # The across-ranks count column says what it counts.
    assert "arrived last" in out and not re.search(r"[|┃] late [|┃]", out)


def _ms_of(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def _span(values: list[int]) -> str:
    lo, hi = _ms_of(min(values)), _ms_of(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_a_finding_over_several_steps_speaks_per_step_and_quotes_their_range(fmt):
    # cuda_nccl_item (a real H100 recording): one .item() sync stall in each of steps 3-5 (step 6's is brief, an
    # entry of its own), whose CPU-blocked and device-idle times differ from step to step (the report's
    # evidence per step). The one entry over steps 3–5 says so, never "in this step", and quotes the three
    # steps' lowest–highest, not one step's values.
    rep = report(SAMPLES / "cuda_nccl_item")
    stalls = [d for d in rep.diagnoses if d.id == "sync-stall" and d.title.startswith("sync stall")]
    assert [d.step for d in stalls] == [3, 4, 5]
    blocked = _span([d.evidence["sites"][0]["blocked_ns"] for d in stalls])
    idle = _span([d.evidence["sites"][0]["idle_after_ns"] for d in stalls])
    out = " ".join((text(rep, 400) if fmt == "text" else markdown(rep)).split())
    entry = out.split("steps 3–5 · ")[1].split(" step 6 · ")[0]
    assert entry.count("in this step") == 0 and "in each of steps 3–5: 1×" in entry
    assert f"CPU blocked {blocked} ms, device idle {idle} ms after it" in entry, entry
    assert "–" in blocked        # the steps differ: a range, where one step's value alone was shown


def test_findings_whose_wording_differs_are_not_merged_into_one_entry():
    # gloo_no_sync (a real CPU recording): rank 1's step 2 is mostly a wait for the other rank (its advice
    # says so), steps 3-4 are not; a range over all three steps would put the wait advice of one step under
    # the others. Each wording is its own entry, and each entry's numbers are its own steps' range.
    rep = report(SAMPLES / "gloo_no_sync")
    mine = [d for d in rep.diagnoses if d.id == "overlap-pattern" and d.rank == 1]
    out = " ".join(text(rep, 400).split())
    waits = [d for d in mine if "peer_wait" in d.evidence]
    rest = [d for d in mine if "peer_wait" not in d.evidence]
    assert [d.step for d in waits] == [2] and [d.step for d in rest] == [3, 4]
    assert "rank 1 · step 2 · two-phase" in out and "rank 1 · steps 3–4 · two-phase" in out
    exposed = _span([d.evidence["exposed_comm_ns"] for d in rest])
    assert f"in each of steps 3–4: 1 all-reduce starts after the main thread's compute phase; {exposed} ms exposed" in out


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_the_network_transport_is_shown_once_with_the_nccl_version_that_ran(fmt):
    # cuda_nccl_item (a real H100 recording): its NCCL log says "NCCL version 2.28.9+cuda13.0" (nccl/vm.503.log
    # line 3), the container's environment NCCL_VERSION=2.28.3-1. The transport's verdict, its log lines and
    # its facts appear once, with its finding; each version says where it comes from.
    rep = tracelens.report(str(SAMPLES / "cuda_nccl_item"), cache=False)     # with its run directory's NCCL log
    assert rep.transport.nccl_version == "2.28.9" and rep.transport.env["NCCL_VERSION"] == "2.28.3-1"
    (finding,) = [d for d in rep.diagnoses if d.id == "nccl-transport"]
    out = " ".join((text(rep, 400) if fmt == "text" else markdown(rep)).replace("\\", "").split())
    assert out.count("no connection leaves the node") == 1 and out.count("Using network Socket") == 1
    assert out.count(finding.title) == 1 and "Network transport" not in out and "network transport:" in out
    assert out.count("intra_node_only") == 1                 # the communicator's verdict, with the finding
    assert "NCCL 2.28.9 (from its log)" in out
    assert "NCCL_VERSION=2.28.3-1 (an environment variable; the NCCL that ran is 2.28.9, from its log)" in out
    assert "lines quoted from sample_traces/cuda_nccl_item/nccl/vm.503.log" in out.replace(str(SAMPLES.parent) + "/", "")
