"""What the command line costs before it does any work, for one or more tracelens source trees side by side.

    python bench/bench_startup.py [TREE ...] [--rounds 15] [--input sample_traces/wfbp_100]

Each TREE is a folder holding a ``tracelens`` package (a ``git worktree`` or ``git archive`` of another
commit, and this checkout); the default is this checkout alone. Every round runs each tree once per
measure, the trees alternating, each in a fresh interpreter (``-P``, started outside any checkout, so the
tree's package is the one imported), as the ``tracelens`` console script runs (``tracelens.cli.run``):

- ``tracelens --help`` and ``tracelens --version``: wall time of the whole process;
- ``import tracelens.cli``: the cumulative time ``python -X importtime`` gives it, and how many modules
  that import loads (what ``--help`` pays before click answers);
- ``tracelens report INPUT`` warm (the text report; each tree its own cache, filled by one run first) and
  ``--no-cache`` (a first report): wall time of the whole process.

Prints the fastest and the median of each measure per tree. The start-up budget itself (which modules
``--help`` may load) is a test, tests/unit/test_startup_budget.py; this measures what it costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The console script's own code path (tracelens.cli.run: fast exit included), for the tree first on sys.path.
_CLI = ("import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'tracelens'; "
        "import tracelens.cli; assert tracelens.cli.__file__.startswith(sys.path[0]); tracelens.cli.run()")
_IMPORT = "import sys; sys.path.insert(0, sys.argv[1]); import tracelens.cli"


def _wall(args: list[str], env: dict) -> float:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-P", *args], capture_output=True, text=True, cwd="/", env=env)
    took = time.perf_counter() - t
    if out.returncode:
        raise SystemExit(f"{args}: exit {out.returncode}\n{out.stderr[-2000:]}")
    return took


def _importtime(tree: str, env: dict) -> tuple[float, int]:
    """(cumulative seconds of ``import tracelens.cli``, modules imported) from ``-X importtime``."""
    out = subprocess.run([sys.executable, "-P", "-X", "importtime", "-c", _IMPORT, tree], capture_output=True,
                         text=True, cwd="/", env=env)
    rows = [line.split("|") for line in out.stderr.splitlines() if line.startswith("import time:")][1:]
    cli = [int(r[1]) for r in rows if r[2].strip() == "tracelens.cli"]
    return cli[0] / 1e6, len(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="*", type=Path, default=[ROOT])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--input", type=Path, default=ROOT / "sample_traces/wfbp_100")
    a = ap.parse_args()
    trees = [str(t.resolve()) for t in a.trees]
    report = str(a.input.resolve())
    caches = {t: tempfile.mkdtemp(prefix="tl-startup-") for t in trees}
    envs = {t: {**os.environ, "TRACELENS_CACHE": caches[t], "COLUMNS": "120"} for t in trees}
    for env in envs.values():
        env.pop("TRACELENS_NO_CACHE", None)
        env.pop("PYTHONPATH", None)
    measures = {
        "tracelens --help": lambda t: _wall(["-c", _CLI, t, "--help"], envs[t]),
        "tracelens --version": lambda t: _wall(["-c", _CLI, t, "--version"], envs[t]),
        "import tracelens.cli (importtime)": lambda t: _importtime(t, envs[t])[0],
        f"report {a.input.name}, warm": lambda t: _wall(["-c", _CLI, t, "report", report], envs[t]),
        f"report {a.input.name}, --no-cache": lambda t: _wall(["-c", _CLI, t, "report", report, "--no-cache"],
                                                             envs[t]),
    }
    for t in trees:             # fill each tree's cache, and compile its bytecode
        _wall(["-c", _CLI, t, "report", report], envs[t])
    times = {(m, t): [] for m in measures for t in trees}
    for _ in range(a.rounds):
        for m, run in measures.items():
            for t in trees:
                times[m, t].append(run(t))
    print(f"{a.rounds} rounds, trees alternating; fastest / median")
    for t in trees:
        print(f"\n{t}: import tracelens.cli loads {_importtime(t, envs[t])[1]} modules")
        for m in measures:
            xs = times[m, t]
            print(f"  {m:40s} {min(xs) * 1e3:8.1f} / {statistics.median(xs) * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
