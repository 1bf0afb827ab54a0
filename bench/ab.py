"""Alternating A/B timing of two tracelens source trees on one input (for changes smaller than the noise).

    python bench/ab.py TREE_A TREE_B [INPUT] [--rounds 5] [--reports 15]

TREE_A and TREE_B are folders holding a ``tracelens`` package (for instance a ``git worktree`` of the
commit before a change, and this checkout). Each round runs a fresh interpreter per tree, one after the
other, that imports that tree's tracelens and times ``--reports`` warm in-process reports of INPUT (the
first 3 are dropped); the rounds alternate, so a busy spell of a shared machine hits both. Prints the
fastest, 10th-percentile and median report of each tree. INPUT defaults to the largest corpus export.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared/corpus/nsys/nsys-ai/mfu_2gpu_before.sqlite"

_CHILD = r'''
import json, os, sys, time
tree, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.environ["TRACELENS_NO_CACHE"] = "1"   # every report parses: the cache would serve all but the first
sys.path.insert(0, tree)
import tracelens
from tracelens.renderers import render
assert tracelens.__file__.startswith(tree), f"imported {tracelens.__file__}, not the tree {tree}"
times = []
for _ in range(n + 3):
    t = time.perf_counter()
    render(tracelens.analyze(tracelens.load(path)), "json")
    times.append(time.perf_counter() - t)
print(json.dumps(times[3:]))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree_a", type=Path)
    ap.add_argument("tree_b", type=Path)
    ap.add_argument("input", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reports", type=int, default=15)
    a = ap.parse_args()
    trees = [str(a.tree_a.resolve()), str(a.tree_b.resolve())]
    times: dict[str, list[float]] = {t: [] for t in trees}
    for _ in range(a.rounds):
        for tree in trees:
            # -P: the current directory must not shadow the tree's package; run outside any checkout.
            out = subprocess.run([sys.executable, "-P", "-c", _CHILD, tree, str(a.input.resolve()), str(a.reports)],
                                 capture_output=True, text=True, cwd="/")
            if out.returncode:
                sys.stderr.write(out.stderr)
                return 1
            times[tree] += json.loads(out.stdout)
    for tree in trees:
        v = sorted(times[tree])
        print(f"{tree}: fastest {v[0] * 1e3:.1f} ms, p10 {v[len(v) // 10] * 1e3:.1f} ms, "
              f"median {statistics.median(v) * 1e3:.1f} ms ({len(v)} reports)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
