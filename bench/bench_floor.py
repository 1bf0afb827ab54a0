"""A report against the floor: what the machine needs at least to read the same trace, side by side.

    python bench/bench_floor.py [TRACE] [--rounds 15] [--tree DIR]

Every measure is a whole process, started in turn with the others in each round (a busy spell of this shared
machine hits them all), bytecode cached as for an installed package:

- ``floor``: the interpreter importing numpy, msgspec and ISA-L, gunzipping TRACE and decoding its events
  typed (name, phase, category, times, process and thread ids; no ``args``), then leaving without teardown
  as tracelens does: what reading the trace costs at least, whatever reads it (issue 35's floor);
- ``first``: ``tracelens report TRACE --format json`` with an empty cache (the entries written);
- ``no-cache``: the same with ``--no-cache``;
- ``warm``: ``tracelens report TRACE`` (text) with the cache the first report filled;
- ``import``: ``python -c "import click, msgspec"``, the warm report's floor.

Prints each measure's median wall and CPU seconds (its children's included) and the ratios the goals are
stated in: first / floor, first / no-cache, warm / import. ``--tree``: the tracelens source tree to run
(default: this checkout), for a side-by-side with another commit.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared/corpus/hta/df_index_resolver/df_index_resolver.json.gz"

FLOOR = r'''
import sys
from typing import Union
import msgspec, numpy
from isal import igzip

class Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: Union[str, int, float, None] = None
    cat: Union[str, None] = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None

class Document(msgspec.Struct, gc=False):
    traceEvents: list[Event] = []

with open(sys.argv[1], "rb") as fh:
    raw = fh.read()
if raw[:2] == b"\x1f\x8b":
    raw = igzip.decompress(raw)
doc = msgspec.json.decode(raw, type=Document)
assert doc.traceEvents
import os
os._exit(0)
'''

CLI = ("import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'tracelens'; import tracelens.cli; "
       "assert tracelens.cli.__file__.startswith(sys.path[0]); tracelens.cli.run()")


def _run(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall, cpu) seconds of one process and the children it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd="/")
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ...: exit {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tree", type=Path, default=ROOT)
    a = ap.parse_args()
    trace, tree = str(a.trace.resolve()), str(a.tree.resolve())
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "TRACELENS_JOBS", "TRACELENS_NO_CACHE", "TRACELENS_CACHE")}
    py = [sys.executable, "-P"]
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(tree) / "tracelens")], env=env, check=True)
    scratch = Path(tempfile.mkdtemp(prefix="tl-floor-"))
    cold, warm = scratch / "cold", scratch / "warm"
    report = [*py, "-c", CLI, tree, "report", trace]
    # The warm report's cache, filled once (its Report and text rendering).
    _run([*report, "-o", str(scratch / "out.txt"), "--force"], {**env, "TRACELENS_CACHE": str(warm)})
    measures = {
        "floor": ([*py, "-c", FLOOR, trace], env),
        "first": ([*report, "--format", "json", "-o", os.devnull], {**env, "TRACELENS_CACHE": str(cold)}),
        "no-cache": ([*report, "--format", "json", "-o", os.devnull, "--no-cache"], env),
        "warm": ([*report, "-o", str(scratch / "out.txt"), "--force"], {**env, "TRACELENS_CACHE": str(warm)}),
        "import": ([*py, "-c", "import click, msgspec"], env),
    }
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in measures}
    try:
        for _ in range(a.rounds):
            for name, (cmd, menv) in measures.items():
                if name == "first":
                    shutil.rmtree(cold, ignore_errors=True)
                got[name].append(_run(cmd, menv))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def med(name: str, i: int) -> float:
        return statistics.median(x[i] for x in got[name])

    def ratio(a_: str, b_: str, i: int) -> float:
        return statistics.median(x[i] / y[i] for x, y in zip(got[a_], got[b_]))

    print(f"{Path(trace).name}, {a.rounds} rounds, tree {tree}")
    for name in measures:
        print(f"  {name:9s} wall {med(name, 0):.3f} s  cpu {med(name, 1):.3f} s")
    for a_, b_ in (("first", "floor"), ("first", "no-cache"), ("warm", "import")):
        print(f"  {a_} / {b_}: wall {ratio(a_, b_, 0):.2f}x  cpu {ratio(a_, b_, 1):.2f}x  (median of paired ratios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
