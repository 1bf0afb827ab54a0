"""Rank scaling: wall time and peak memory (all processes: tracelens, its decode workers, Dask workers) of a
report over N copies of one corpus rank, each given its own rank id (``distributedInfo.rank`` rewritten).

    python bench/bench_scale.py            # small rank x 8, 64, 256, 1024; 54 MB rank x 8, 64, 128
    python bench/bench_scale.py --quick    # small x 8, 64; 54 MB x 8
    python bench/bench_scale.py --hta      # also HTA 0.5.0 from /tmp/hta-venv (pip install holistictraceanalysis==0.5.0)

Engines: ``local`` is a first report (the bench's own cache, /tmp/tl-bench/cache, emptied before it: it
decodes, analyses and fills the cache, as a user's first report does); ``warm`` the same report again (what a
user's second report costs; after an untimed first one when ``local`` is not run); ``cold`` and ``dask``
run with ``--no-cache`` (neither reading nor filling it).

A run past 600 s or TL_BENCH_MEM_GB (default 8) of memory is stopped and marked so.
The copies are written once to /tmp/tl-bench (gzip level 1; a size's folder links to the first N of them).
Peak memory is the largest sum of the resident sets of the process tree, polled every 20 ms.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
WORK = Path(os.environ.get("TL_BENCH_DIR", "/tmp/tl-bench"))
TRACELENS = Path(sys.executable).parent / "tracelens"
SETS = {   # name: (corpus file, sizes, quick sizes)
    "small": ("hta/trace_filter/sampled_rank-0.json.gz", (8, 64, 256, 1024), (8, 64)),
    "54MB": ("hta/df_index_resolver/df_index_resolver.json.gz", (8, 64, 128), (8,)),
}
_INFO = re.compile(rb'"distributedInfo"\s*:\s*\{[^}]*?"rank"\s*:\s*\d+\s*,\s*"world_size"\s*:\s*\d+')


def copies(name: str, src: Path, n: int) -> Path:
    """A folder of ``n`` copies of ``src`` with ranks 0..n-1 (hard links into a pool written once: a folder's
    symbolic links that lead outside it are not followed, docs/errors.md)."""
    pool = WORK / name / "pool"
    pool.mkdir(parents=True, exist_ok=True)
    have = len(list(pool.glob("*.json.gz")))
    if have < n:
        text = gzip.decompress(src.read_bytes())
        head, tail = text[:1 << 20], text[1 << 20:]
        if not _INFO.search(head):
            raise SystemExit(f"{src}: no distributedInfo rank in its first MB")
        for r in range(have, n):
            new = _INFO.sub(b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d' % (r, 1024),
                            head, count=1)
            (pool / f"rank{r:04d}.json.gz").write_bytes(gzip.compress(new + tail, compresslevel=1))
    folder = WORK / name / f"n{n}"
    if folder.is_dir() and any(p.is_symlink() for p in folder.iterdir()):
        shutil.rmtree(folder)                   # made by an older version of this script, with symbolic links
    if not folder.is_dir():
        folder.mkdir()
        for r in range(n):
            os.link(pool / f"rank{r:04d}.json.gz", folder / f"rank{r:04d}.json.gz")
    return folder


MEM_LIMIT = int(float(os.environ.get("TL_BENCH_MEM_GB", "8")) * 1e9)   # the machine is shared: stop a run past it


def measure(cmd: list[str], timeout: float = 600) -> tuple[float | None, int, int]:
    """(wall seconds or None past ``timeout`` or MEM_LIMIT, peak resident bytes of the process tree, exit
    code: -9 when stopped)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    top = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        if time.perf_counter() - start > timeout:
            proc.kill()
            proc.wait()
            return None, peak, -9
        total = 0
        try:
            for p in [top, *top.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, total)
        if peak > MEM_LIMIT:
            for p in top.children(recursive=True):
                p.kill()
            proc.kill()
            proc.wait()
            return None, peak, -9
        time.sleep(0.02)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    if proc.returncode:
        print(f"  exit {proc.returncode}: {err.strip()[-300:]}", file=sys.stderr)
    return wall, peak, proc.returncode


HTA_SCRIPT = ("import sys; from hta.trace_analysis import TraceAnalysis; "
              "a = TraceAnalysis(trace_dir=sys.argv[1]); a.get_comm_comp_overlap(visualize=False)")


# HTA holds every rank's frames: past this much JSON it is not started (128 copies of the 54 MB trace, 7 GB
# of JSON, took it 272 s and 4.0 GB; TL_BENCH_MEM_GB stops a run that grows past the machine's share).
HTA_MAX_JSON = 16e9


def commands(folder: Path, hta: bool, before: str | None, json_bytes: float) -> dict[str, list[str]]:
    report = [str(TRACELENS), "report", str(folder), "--format", "json"]
    out = {"local": report,
           "warm": report,
           "cold": [*report, "--no-cache"],
           "dask": [*report, "--no-cache", "--executor", "dask", "--workers", "2"]}
    if before:      # another checkout's tracelens (e.g. `git archive main tracelens | tar -x -C DIR`)
        out["before"] = [sys.executable, "-c", f"import sys; sys.path.insert(0, {before!r}); "
                         "from tracelens.cli import run; sys.argv[0] = 'tracelens'; run()",
                         "report", str(folder), "--format", "json"]
    if hta and json_bytes <= HTA_MAX_JSON:
        out["hta"] = ["/tmp/hta-venv/bin/python", "-c", HTA_SCRIPT, str(folder)]
    return out


def main() -> None:
    # The bench's own cache, unbounded enough for 128 copies of the 54 MB trace: a user's cache is not touched.
    os.environ["TRACELENS_CACHE"] = str(WORK / "cache")
    os.environ.setdefault("TRACELENS_CACHE_MAX", "16G")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes (small x 8, 64; 54 MB x 8)")
    ap.add_argument("--hta", action="store_true", help="also HTA 0.5.0 from /tmp/hta-venv")
    ap.add_argument("--sets", default="small,54MB", help="which sets (comma-separated: small, 54MB)")
    ap.add_argument("--executors", default="local,warm,dask",
                    help="which of local, warm, cold, dask (comma-separated)")
    ap.add_argument("--sizes", help="only these rank counts (comma-separated, e.g. 256,1024)")
    ap.add_argument("--before", metavar="DIR", help="also the tracelens package under DIR (an older version)")
    args = ap.parse_args()
    wanted = args.executors.split(",") + (["hta"] if args.hta else []) + (["before"] if args.before else [])
    print(f"# {os.cpu_count()} cpus; {sys.version.split()[0]}; {' '.join(sys.argv)}")
    print("| set | ranks | engine | wall s | s/rank (ms) | peak MB | MB/rank |")
    print("|---|---|---|---|---|---|---|")
    for name in args.sets.split(","):
        rel, sizes, quick = SETS[name]
        src = CORPUS / rel
        json_bytes = len(gzip.decompress(src.read_bytes()))
        for n in quick if args.quick else sizes:
            if args.sizes and str(n) not in args.sizes.split(","):
                continue
            folder = copies(name, src, n)
            for engine, cmd in commands(folder, args.hta, args.before, n * json_bytes).items():
                if engine not in wanted:
                    continue
                if engine in ("local", "before"):       # a first report, each version its own
                    shutil.rmtree(WORK / "cache", ignore_errors=True)
                if engine == "warm" and "local" not in wanted:
                    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
                wall, peak, code = measure(cmd)
                shown = "stopped (600 s or memory limit)" if wall is None else f"{wall:.1f}" + ("" if code == 0 else f" (exit {code})")
                per = "" if wall is None else f"{wall / n * 1e3:.0f}"
                print(f"| {name} | {n} | {engine} | {shown} | {per} | {peak / 1e6:.0f} | {peak / 1e6 / n:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
