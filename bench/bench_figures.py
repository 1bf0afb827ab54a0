"""Time the dashboard's views on a generated 1,024-rank x 50-step Report (tests/fixtures/reports.py): each
figure or table built from the Report and serialised to JSON, as the server does for every interaction. The
goal is under 1 s of server time per view. Prints the median of several runs per view.

    .venv/bin/python bench/bench_figures.py [--ranks 1024] [--steps 50] [--collectives 2] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fixtures.reports import synthetic  # noqa: E402

from tracelens.contract import CrossRank, Matching, MatchedCollective, RankAcross  # noqa: E402
from tracelens.renderers import across_ranks, figures  # noqa: E402


def with_cross_rank(rep):
    """The Report with a cross_rank section matching its collectives over every rank (the k-th of each rank
    and step is one instance), each member as the rank's own collective: enough for the strip's scale."""
    inst: dict = {}
    for c in rep.collectives:
        inst.setdefault((c.step, c.start_ns), []).append(c)
    colls = []
    for (step, _), members in sorted(inst.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        ends = [m.start_ns + m.duration_ns for m in members]
        starts = [m.start_ns for m in members]
        transfer = min(e - s for s, e in zip(starts, ends))
        colls.append(MatchedCollective(
            pg="0", seq=len(colls), step=step, op=members[0].op, bytes=members[0].bytes, group_size=len(members),
            ranks=[m.rank for m in members], last_rank=None, arrival_skew_ns=max(starts) - min(starts),
            transfer_ns=transfer, wait_ns=sum(e - s - transfer for s, e in zip(starts, ends)), algbw_gbps=None,
            busbw_gbps=None, starts_ns=starts, ends_ns=ends))
    rep.cross_rank = CrossRank(reference_rank=0, ranks=[
        RankAcross(rank=r.rank, host=None, clock_offset_ns=0, clock_spread_ns=0, clock_corrected=True, matched=0,
                   wait_ns=0, transfer_ns=0, exposed_wait_ns=0, late_count=0) for r in rep.ranks],
        collectives=colls, bandwidth=[], matching=Matching(key="pg-seq", matched=len(colls), unmatched=0,
                                                           missing_ranks=[]))
    return rep


def views(rep, collectives_top: int):
    mid = rep.ranks[0].steps[len(rep.ranks[0].steps) // 2].step
    return {
        "budget, all steps": lambda: figures.budget(rep).to_json(),
        "budget, one step, sorted by exposed": lambda: figures.budget(rep, mid, "exposed").to_json(),
        "heatmap, exposed fraction": lambda: figures.heatmap(rep, "exposed_comm_fraction").to_json(),
        "heatmap, step time": lambda: figures.heatmap(rep, "duration_ns").to_json(),
        "findings rows": lambda: json.dumps(figures.findings_rows(rep)),
        "collective strip, one step": lambda: across_ranks.strip(rep, mid).to_json(),
        "collective strip, all steps (merged)": lambda: across_ranks.strip(rep, "all").to_json(),
        f"collectives rows (top {collectives_top:,})":
            lambda: json.dumps(figures.collectives_rows(rep, collectives_top)),
        "dashboard page (first load, /_dash-layout)": lambda: _client(rep).get("/_dash-layout").data,
        "html report (all of it)": lambda: __import__("tracelens.renderers.html", fromlist=["render"]).render(rep),
    }


_clients: dict = {}


def _client(rep):
    """The dashboard's Flask test client (the app built once: starting the server is not a view)."""
    if id(rep) not in _clients:
        from tracelens.dashboards import Run, Session, create_app

        _clients[id(rep)] = create_app(Session([Run("A", rep)])).server.test_client()
    return _clients[id(rep)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--collectives", type=int, default=2, help="collectives per rank and step")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rep = with_cross_rank(synthetic(args.ranks, args.steps, args.collectives))
    print(f"report: {args.ranks} ranks x {args.steps} steps, {len(rep.collectives):,} collectives, "
          f"{len(rep.diagnoses)} findings (built in {time.perf_counter() - t0:.2f} s)")
    figures.budget(rep).to_json()           # plotly's first use imports and validates its schema: not a view
    worst = 0.0
    for name, fn in views(rep, 5_000).items():
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        worst = max(worst, med) if not name.startswith("html") else worst
        print(f"{name:42s} median {med * 1000:8.1f} ms (min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}); "
              f"{len(out) / 1e6:.2f} MB")
    print(f"slowest interactive view: {worst * 1000:.1f} ms ({'under' if worst < 1 else 'OVER'} 1 s)")
    return 0 if worst < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
