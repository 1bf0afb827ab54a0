"""The run-level tables and lines the text and Markdown renderers share: ranks side by side (waits, transfers,
clock offsets, the distribution past 16 ranks), bandwidth, the network transport, the parallelism dimensions
and the run verdict, with the warnings merged over ranks (numbers only; no metric is computed here)."""

from __future__ import annotations

from ..contract import RankResult, Report
from .common import IEC, STEP_HEADERS, STEPS_ALL_UP_TO, frac, ms, pct, plural, ranges, size


ACROSS_HEADERS = ("rank", "host", "wait ms", "transfer ms", "exposed wait ms", "arrived last", "clock offset ms")
BANDWIDTH_HEADERS = ("op", "ranks", "size", "count", "algbw GB/s", "busbw p10", "busbw p50", "busbw p90")
# Each table's columns of words, aligned left in the text and the Markdown alike (the rest are numbers, right).
ACROSS_LEFT = ("rank", "host")
BANDWIDTH_LEFT = ("op", "size")
ACROSS_ALL_UP_TO = 16      # more ranks than this: the ones that wait most and least, and the distribution
ACROSS_EACH_END = 5
UNCORRECTED = "*"          # marks a clock offset that was estimated but not applied


def _offset(r, decimals: int) -> str:
    if r.clock_offset_ns is None:
        return "—"
    return f"{r.clock_offset_ns / 1e6:+.{decimals}f}" + ("" if r.clock_corrected else UNCORRECTED)


def across_cells(r, decimals: int = 3) -> list[str]:
    return [str(r.rank), r.host or "", ms(r.wait_ns, decimals), ms(r.transfer_ns, decimals),
            ms(r.exposed_wait_ns, decimals), str(r.late_count), _offset(r, decimals)]


def nearest(values: list, q: float):
    """The nearest-rank quantile ``q`` of sorted values."""
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


# Past this many ranks the text and Markdown reports show the step tables' distribution over ranks and the
# tables of the most exposed ranks (``--ranks all``: every rank's).
RANKS_ALL_UP_TO = 16
MOST_EXPOSED_SHOWN = 8
DISTRIBUTION_HEADERS = ("per step", "min", "median", "p90", "max")
DISTRIBUTION_LEFT = ("per step",)


def shown_ranks(report: Report, rank: int | None = None, every: bool = False) -> tuple[list, bool]:
    """The ranks whose step tables are shown, and whether they are the most exposed few of many (then the
    distribution over all ranks goes first): ``rank`` alone, every rank up to RANKS_ALL_UP_TO (or with
    ``every``), else the MOST_EXPOSED_SHOWN with the most exposed communication, most exposed first."""
    if rank is not None:
        return [r for r in report.ranks if r.rank == rank], False
    if every or len(report.ranks) <= RANKS_ALL_UP_TO:
        return list(report.ranks), False
    worst = sorted(report.ranks, key=lambda r: (-r.totals.exposed_comm_ns, r.rank))
    return worst[:MOST_EXPOSED_SHOWN], True


# Past STEPS_ALL_UP_TO steps (common.py) a rank's step table shows each column's distribution over its steps
# and the steps with the most exposed communication (``--steps all``: every step).
WORST_STEPS_SHOWN = 5
STEP_QUANTILES = (("min", 0.0), ("median", 0.5), ("p90", 0.9), ("max", 1.0))


def shown_steps(r: RankResult, every: bool = False) -> tuple[list, list[list[str]] | None]:
    """The steps whose rows a rank's step table shows, and (past STEPS_ALL_UP_TO steps, without ``every``) the
    rows that go first: each column's min, median, p90 and max over the rank's steps (nearest rank, as over
    ranks); then the WORST_STEPS_SHOWN steps with the most exposed communication, in step order."""
    if every or len(r.steps) <= STEPS_ALL_UP_TO:
        return list(r.steps), None
    worst = sorted(r.steps, key=lambda s: (-s.exposed_comm_ns, s.start_ns))[:WORST_STEPS_SHOWN]
    return sorted(worst, key=lambda s: s.start_ns), step_distribution_rows(r.steps)


def step_distribution_rows(steps: list, decimals: int = 3) -> list[list[str]]:
    """One row per quantile (min, median, p90, max), each column's own over the steps; the pattern cell empty."""
    times = ("duration_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "idle_ns", "copy_ns")
    columns = [sorted(getattr(s, k) for s in steps) for k in times]
    shares = [sorted(v for s in steps if (v := getattr(s, k)) is not None)
              for k in ("overlap_pct", "exposed_comm_fraction")]
    rows = []
    for label, q in STEP_QUANTILES:
        cells = [ms(nearest(c, q), decimals) for c in columns]
        cells += [pct(nearest(shares[0], q)) if shares[0] else pct(None),
                  frac(nearest(shares[1], q)) if shares[1] else frac(None)]
        rows.append([label] + cells + [""])
    return rows


def steps_caption(r: RankResult, shown: list, flag: str) -> str:
    """The line under a summarised step table: what its rows are, and how to see every step."""
    return (f"{len(r.steps)} steps: min, median, p90 and max of each column over them, then the {len(shown)} "
            f"with the most exposed communication ({flag}: every step)")


def distribution_rows(report: Report, decimals: int = 3) -> list[list[str]]:
    """Each step-table column over the ranks: its mean per step on each rank (overlap % and the exposed
    fraction from the rank's totals), then the min, median, p90 and max of those."""
    per_rank = []
    for r in report.ranks:
        n = len(r.steps) or 1
        t = r.totals
        per_rank.append([t.duration_ns / n, t.compute_ns / n, t.comm_ns / n, t.overlap_ns / n, t.exposed_comm_ns / n,
                         t.idle_ns / n, t.copy_ns / n, t.overlap_pct, t.exposed_comm_fraction])
    names = [h for h in STEP_HEADERS[1:-1]]
    rows = []
    for k, name in enumerate(names):
        values = sorted(v[k] for v in per_rank if v[k] is not None)
        if not values:
            rows.append([name] + ["n/a"] * 4)
            continue
        cells = [values[0], nearest(values, 0.5), nearest(values, 0.9), values[-1]]
        fmt = pct if name == "overlap %" else frac if name == "exposed frac" else \
            (lambda v: ms(int(round(v)), decimals))
        rows.append([name] + [fmt(v) for v in cells])
    return rows


def merged_warnings(report: Report) -> list[tuple[str, str, int, str]]:
    """The report's warnings with those of the same code and message on several ranks as one: (who, code,
    count summed, message)."""
    groups: dict[tuple, list] = {}
    for w in report.warnings:
        groups.setdefault((w.code, w.message), []).append(w)
    out = []
    for (code, message), ws in groups.items():
        ranks = sorted({w.rank for w in ws if w.rank is not None})
        who = "" if not ranks else (f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranges(ranks)}")
        out.append((who, code, sum(w.count for w in ws), message))
    return out


def has_across(report: Report) -> bool:
    """Whether the report has ranks side by side to show: cross-rank results with a collective on some rank.
    A run without communication would show a table of zeros, which says nothing the verdict does not."""
    cr = report.cross_rank
    return cr is not None and (cr.matching.matched > 0 or cr.matching.unmatched > 0)


def across_rows(report: Report) -> tuple[list, str]:
    """The rank table's rows (None marks the gap between the most and the least waiting ranks) and, when not
    every rank is shown, the distribution of wait over all ranks in one line (display only)."""
    ranks = report.cross_rank.ranks
    if len(ranks) <= ACROSS_ALL_UP_TO:
        return list(ranks), ""
    by_wait = sorted(ranks, key=lambda r: (-r.wait_ns, r.rank))
    waits = sorted(r.wait_ns for r in ranks)
    line = (f"wait over {len(ranks)} ranks (ms): min {ms(waits[0])}, p10 {ms(nearest(waits, 0.1))}, median "
            f"{ms(nearest(waits, 0.5))}, p90 {ms(nearest(waits, 0.9))}, max {ms(waits[-1])}; the {ACROSS_EACH_END} "
            "ranks that waited most and least shown")
    return by_wait[:ACROSS_EACH_END] + [None] + by_wait[-ACROSS_EACH_END:], line


def matching_line(report: Report) -> str:
    m = report.cross_rank.matching
    line = (f"{plural(m.matched, 'collective', 'collectives')} matched across ranks (key {m.key or 'none'}), "
            f"{m.unmatched} unmatched")
    if m.missing_ranks:
        line += f"; ranks not given: {ranges(m.missing_ranks)}"
    if any(not r.clock_corrected and r.clock_offset_ns is not None for r in report.cross_rank.ranks):
        line += f"; {UNCORRECTED} clock offset too uncertain to apply"
    return line


def _binary(n: int) -> str:
    """Bucket edges are powers of two: ``16 MiB``."""
    for unit, scale in IEC:
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _sizes(b) -> str:
    """The sizes a row's collectives had: one size as itself, else the smallest and largest; a report written
    before it held them, its bucket."""
    if b.smallest_bytes is not None and b.largest_bytes is not None:
        lo, hi = size(b.smallest_bytes), size(b.largest_bytes)
        return lo if lo == hi else f"{lo}–{hi}"
    return f"< {_binary(b.max_bytes)}" if b.min_bytes == 0 else \
        f">= {_binary(b.min_bytes)}" if b.max_bytes is None else f"{_binary(b.min_bytes)}–{_binary(b.max_bytes)}"


def _gbps(v: float | None) -> str:
    return "—" if v is None else f"{v:,.1f}"


def bandwidth_cells(b) -> list[str]:
    note = " (latency)" if b.latency_bound else ""
    return [(b.op or "?") + note, str(b.group_size), _sizes(b), str(b.count), _gbps(b.algbw_p50_gbps),
            _gbps(b.busbw_p10_gbps), _gbps(b.busbw_p50_gbps), _gbps(b.busbw_p90_gbps)]


def transport_facts(t, severity: bool = True) -> str:
    """``warning · NCCL 2.27.3 (from its log) · multi-node · 2 NCCL logs``: what goes with the transport's
    verdict (``severity``: lead with it, as the section without a finding does)."""
    parts = [t.severity] if severity else []
    if t.nccl_version:
        parts.append(f"NCCL {t.nccl_version} (from its log)")
    parts.append({True: "multi-node", False: "single node", None: "nodes unknown"}[t.multi_node])
    parts.append(plural(t.logs, "NCCL log", "NCCL logs"))
    return " · ".join(parts)


def settings_row(t) -> str:
    """``recorded settings: NCCL_IB_HCA=mlx5_0, …`` (empty without any). ``NCCL_VERSION`` is an environment
    variable (NVIDIA's containers set it to the NCCL they ship), not the NCCL that ran: said so, beside the
    version the NCCL log gives when they differ."""
    if not t.env:
        return ""
    parts = []
    for k, v in t.env.items():
        note = ""
        if k == "NCCL_VERSION":
            ran = t.nccl_version
            note = (" (an environment variable, not read from NCCL)" if not ran else "" if v.split("-")[0] == ran
                    else f" (an environment variable; the NCCL that ran is {ran}, from its log)")
        parts.append(f"{k}={v}{note}")
    return "recorded settings: " + ", ".join(parts)


def transport_rows(t, with_facts: bool) -> list[str]:
    """What the network transport adds to its verdict, one line each: (``with_facts``: the NCCL version, nodes
    and logs,) its communicators, the recorded NCCL settings and the inter-node bandwidth."""
    rows = [transport_facts(t, severity=False)] if with_facts else []
    rows += [communicator_line(c) for c in t.communicators]
    rows += [row for row in (settings_row(t), bandwidth_line(t.bandwidth) if t.bandwidth is not None else "") if row]
    return rows


def quoted_files(t) -> str:
    """``lines quoted from nccl/h1.100.log, run/manifest.json``: where the finding's quoted lines are."""
    files = list(dict.fromkeys(e.file for e in t.evidence))
    return ("lines quoted from " + ", ".join(files)) if files else ""


def communicator_line(c) -> str:
    """``0x9f3a: ranks 0-15 on 2 hosts, 2 nodes, net Socket, GPUDirect no; NET/Socket 8, P2P/IPC 14 ->
    tcp_no_rdma``."""
    ranks = ("ranks " + _span(c.ranks)) if c.ranks else "ranks unknown"
    parts = [f"{ranks} on {plural(len(c.hosts), 'host', 'hosts')}" if c.hosts else ranks]
    if c.n_nodes is not None:
        parts.append(plural(c.n_nodes, "node", "nodes"))
    for label, value in (("net", c.net), ("plugin", c.plugin)):
        if value:
            parts.append(f"{label} {value}")
    if c.gdr is not None:
        parts.append(f"GPUDirect {'yes' if c.gdr else 'no'}")
    conns = ", ".join(f"{k} {v}" for k, v in c.connections.items())
    return f"{c.id}: {', '.join(parts)}" + (f"; {conns}" if conns else "") + f" -> {c.verdict}"


def bandwidth_line(b) -> str:
    where = {"tcp": f"TCP range (below {b.tcp_max_gbps:g} GB/s)",
             "rdma": f"RDMA range (above {b.rdma_min_gbps:g} GB/s)",
             "ambiguous": f"between TCP and RDMA ({b.tcp_max_gbps:g}-{b.rdma_min_gbps:g} GB/s)"}[b.range]
    return (f"inter-node busbw p50 {b.busbw_gbps_p50:.2f} GB/s (p10 {b.busbw_gbps_p10:.2f}, p90 "
            f"{b.busbw_gbps_p90:.2f}) over {plural(b.collectives, 'collective', 'collectives')}: {where}")


def evidence_where(e) -> str:
    """``nccl/h1.100.log:12`` (a recorded setting: its source alone)."""
    return e.file + (f":{e.line}" if e.line is not None else "")


def _span(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks[:12])) + (f" and {len(ranks) - 12} more" if len(ranks) > 12 else "")


DIMENSION_HEADERS = ("dimension", "ranks", "comm ms", "exposed ms", "overlap %", "most exposed rank", "rules")
DIMENSION_LEFT = ("dimension", "rules")


def dimension_rows(report: Report) -> list:
    """The run's dimensions, most exposed first; none when every rank's communication is of one dimension
    that is data parallel or unattributed (the step tables say it all)."""
    if all(len(r.dimensions) <= 1 and all(d.dimension in ("dp", "unknown") for d in r.dimensions)
           for r in report.ranks):
        return []
    return report.summary.dimensions


def dimension_cells(d, decimals: int = 3) -> list[str]:
    """A dimension's row; its most exposed rank with its exposed time: ``3 (1.200)``."""
    return [d.dimension, str(d.ranks), ms(d.comm_ns, decimals), ms(d.exposed_comm_ns, decimals), pct(d.overlap_pct),
            f"{d.worst_rank} ({ms(d.worst_exposed_ns, decimals)})", ", ".join(d.rules)]


VERDICT_HEADERS = ("cause", "ms per step", "of step", "fixing saves", "ranks", "why")
VERDICT_LEFT = ("cause", "ranks", "why")
_NOWHERE = "too small to matter on any rank"
_WHY = {"compute": "slower compute", "host-gap": "host gaps", "sync-stall": "a sync stall",
        "late-launch": "late launches", "unknown": "cause unknown"}


def verdict_cells(report: Report, c) -> list[str]:
    """A cause of the run verdict as a table row, its numbers as the headline words them (the report's ms with
    three decimals and shares with one)."""
    total = len({r.rank for r in report.ranks})
    if c.cause == "peer-wait":
        why = f"waiting for rank {c.culprit.rank}: {_WHY[c.culprit.reason]}" if c.culprit else \
            "no single rank waited for" if c.ranks else ""
    elif c.cause == "not-overlapped":
        why = f"pattern {c.pattern}" if c.pattern else ""
    else:
        why = "compute slowed beside communication"
    # A cause's ranks are those it is material on: a row with none says so, rather than a cost left unexplained.
    why = why or ("" if c.ranks else _NOWHERE)
    where = "—" if not c.ranks else ranges(c.ranks) + (f" ({len(c.ranks)} of {total})" if total > 1 else "")
    if c.cause == "overlap-tax" and not tax_measured(report):
        # Unknown is not 0: every view of the run (the headline card, the dashboard) says n/a for it.
        return [c.cause, "n/a", "n/a", "n/a", where, why]
    share = "n/a" if c.share_of_step is None else pct(100 * c.share_of_step)
    return [c.cause, ms(c.ns_per_step), share, saving_cell(c), where, why]


def tax_measured(report: Report) -> bool:
    """Whether the run's overlap tax was measured: it is unknown, not zero, when no kernel under communication
    had a run alone to compare with (summary.overlap_tax_compared is 0)."""
    return bool(report.summary.overlap_tax_compared)


def saving_cell(c) -> str:
    """What fixing the cause saves per step (ms) and its interval; "can't tell" where the trace cannot say."""
    if c.saving_ns is None:
        return "can't tell" if c.saving_note else "—"
    if c.saving_low_ns is None or c.saving_high_ns is None or c.saving_low_ns == c.saving_high_ns:
        return ms(c.saving_ns)
    if c.saving_ns - c.saving_low_ns == c.saving_high_ns - c.saving_ns:
        return f"{ms(c.saving_ns)} ±{ms(c.saving_high_ns - c.saving_ns)}"
    return f"{ms(c.saving_ns)} ({ms(c.saving_low_ns)}–{ms(c.saving_high_ns)})"


def verdict_levers(report: Report) -> list[tuple[str, str]]:
    """(cause, lever) of every cause with one, most costly first."""
    return [(c.cause, c.lever) for c in report.verdict.causes if c.lever] if report.verdict else []


def settings_line(r: RankResult) -> str:
    """``configured bucket_cap_mb=0.25 (command line): 8 buckets per step; …`` (empty without settings)."""
    parts = [f"{c.name}={c.configured} ({c.source}): {c.observed}" + (f" — {c.contradiction}" if c.contradiction
                                                                          else "") for c in r.settings]
    return ("configured " + "; ".join(parts)) if parts else ""
