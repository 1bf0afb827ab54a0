"""``combine`` across many ranks: wall time and peak memory of the cross-rank analysis.

Builds RankAnalyses directly (no trace is parsed): RANKS ranks on hosts of 8 (one clock offset per host), each
with COLLECTIVES all-reduces of one process group, keyed by seq, in 4 steps, one rank arriving late at every
collective, and the per-instance Collective entries a real rank carries. Then times ``combine`` (the median
of several runs) and measures its peak Python allocation with tracemalloc in a separate run (tracemalloc
slows the code it watches). The process's peak RSS is printed too.

    python bench/bench_combine.py [--ranks 1024] [--collectives 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import tracemalloc

import numpy as np

from tracelens.analyzers.run import combine
from tracelens.analyzers.seam import COMM_COLUMNS, RankAnalysis
from tracelens.contract import Collective, InputFile, RankResult, StepMetrics, Totals

MS = 1_000_000
STEPS = 4


def rank_analysis(rank: int, n_coll: int, rng: np.random.Generator) -> RankAnalysis:
    per_step = n_coll // STEPS
    seq = np.arange(n_coll, dtype=np.int64)
    step = seq // per_step
    arrive = rng.integers(0, 200_000, n_coll) + (300_000 if rank == 5 else 0)   # rank 5 is always late
    start = step * 100 * MS + (seq % per_step) * 300_000 + arrive + (rank // 8) * 1_234_567
    end = step * 100 * MS + (seq % per_step) * 300_000 + 600_000 + (rank // 8) * 1_234_567
    comm = {"step": step, "op": np.full(n_coll, "all_reduce", dtype=object),
            "dtype": np.full(n_coll, "Float", dtype=object), "bytes": np.full(n_coll, 4 << 20, dtype=np.int64),
            "group_size": np.full(n_coll, -1, dtype=np.int64), "pg_name": np.full(n_coll, "0", dtype=object),
            "pg_desc": np.full(n_coll, "default_pg", dtype=object), "seq": seq, "start_ns": start,
            "end_ns": end, "exposed_ns": (end - start) // 2, "stream": np.full(n_coll, 13, dtype=np.int64),
            "launch_ns": start - 20_000,
            # what each rank did before it arrived: rank 5's 300 µs late with its host idle
            "lead_ns": arrive, "lead_compute_ns": np.minimum(arrive, 200_000), "lead_sync_ns": np.zeros_like(seq),
            "lead_launch_ns": np.zeros_like(seq), "lead_host_ns": arrive - np.minimum(arrive, 200_000)}
    assert set(comm) == set(COMM_COLUMNS)
    steps = [StepMetrics(step=s, start_ns=s * 100 * MS, end_ns=(s + 1) * 100 * MS, duration_ns=100 * MS,
                         compute_ns=60 * MS, comm_ns=30 * MS, overlap_ns=20 * MS, exposed_comm_ns=10 * MS,
                         idle_ns=5 * MS, overlap_pct=66.7, exposed_comm_fraction=0.1) for s in range(STEPS)]
    totals = Totals(duration_ns=400 * MS, compute_ns=240 * MS, comm_ns=120 * MS, overlap_ns=80 * MS,
                    exposed_comm_ns=40 * MS, idle_ns=20 * MS, overlap_pct=66.7, exposed_comm_fraction=0.1)
    result = RankResult(rank=rank, world_size=None, device=0, device_name=None, mode="gpu",
                        source=f"rank{rank}.json", steps=steps, totals=totals, pattern="sawtooth")
    collectives = [Collective(rank=rank, step=int(st), name="ncclDevKernel_AllReduce", op="all_reduce",
                              bytes=4 << 20, start_ns=int(s), duration_ns=int(e - s), exposed_ns=int((e - s) // 2),
                              pg="0", seq=int(q), group_size=None, dtype="Float")
                   for st, s, e, q in zip(step, start, end, seq)]
    return RankAnalysis(rank=rank, source=f"rank{rank}.json", inputs=[InputFile(path=f"rank{rank}.json",
                        format="kineto", rank=rank, bytes=0)], result=result, collectives=collectives, comm=comm,
                        findings=[], warnings=[], host=f"node{rank // 8}",
                        exposed=(start + (end - start) // 2, end))       # the second half of each collective


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--collectives", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    analyses = [rank_analysis(r, args.collectives, rng) for r in range(args.ranks)]
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        rep = combine(analyses)
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    combine(analyses)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    cr = rep.cross_rank
    print(f"combine, {args.ranks} ranks x {args.collectives} collectives, {args.runs} runs: median "
          f"{statistics.median(times):.3f} s (min {min(times):.3f}, max {max(times):.3f}); peak allocated "
          f"{peak / 1e6:.0f} MB (tracemalloc); process peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB")
    late = [d for d in rep.diagnoses if d.id == "straggler"]
    print(f"matched {cr.matching.matched}, unmatched {cr.matching.unmatched}, straggler rank "
          f"{late[0].rank if late else None}, hosts with an offset {len({r.clock_offset_ns for r in cr.ranks})}")


if __name__ == "__main__":
    main()
