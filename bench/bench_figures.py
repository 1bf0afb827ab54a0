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

from tracelens.renderers import figures  # noqa: E402


def views(rep, collectives_top: int):
    mid = rep.ranks[0].steps[len(rep.ranks[0].steps) // 2].step
    return {
        "budget, all steps": lambda: figures.budget(rep).to_json(),
        "budget, one step, sorted by exposed": lambda: figures.budget(rep, mid, "exposed").to_json(),
        "heatmap, exposed fraction": lambda: figures.heatmap(rep, "exposed_comm_fraction").to_json(),
        "heatmap, step time": lambda: figures.heatmap(rep, "duration_ns").to_json(),
        "findings rows": lambda: json.dumps(figures.findings_rows(rep)),
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
    rep = synthetic(args.ranks, args.steps, args.collectives)
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
