"""``make fuzz N=5000``: N cases of each format (Kineto, nsys) in driver subprocesses, one per core, each
batch under a timeout. Prints cases, seconds and findings per format; writes every failing case (its
plan, not its file) to ``tests/fuzz/findings/`` so that it can be replayed (``driver.py replay``), fixed,
and committed under ``regressions/``.

    python tests/fuzz/run.py [N] [--seed SEED] [--jobs JOBS] [--format kineto|nsys]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BATCH = 100                # cases per driver subprocess: a hang costs at most one batch's timeout
BATCH_SECONDS = 300
FORMATS = ["kineto", "nsys", "manifest", "history", "config", "report", "outputs", "inspector"]


def run_batches(fmt: str, seed: int, n: int, jobs: int, batch: int = BATCH, env: dict | None = None) -> list[dict]:
    """Every case's result line; a batch that hangs or dies reports its running case as failed and the rest
    of the batch is run again after it."""
    pending = [(first, min(batch, n - first)) for first in range(0, n, batch)]
    running: list[tuple[subprocess.Popen, int, int, float, tuple]] = []
    results: list[dict] = []
    while pending or running:
        while pending and len(running) < jobs:
            first, count = pending.pop(0)
            # Output to files, not pipes: a batch writing more than a pipe holds would wait for a reader that
            # reads only once it has finished.
            files = (tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+"))
            proc = subprocess.Popen([sys.executable, str(HERE / "driver.py"), fmt, str(seed), str(first), str(count)],
                                    stdout=files[0], stderr=files[1], text=True, env={**os.environ, **(env or {})})
            running.append((proc, first, count, time.monotonic(), files))
        time.sleep(0.05)
        for item in list(running):
            proc, first, count, began, files = item
            if proc.poll() is None and time.monotonic() - began < BATCH_SECONDS:
                continue
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            out, err = (_read(f) for f in files)
            running.remove(item)
            done, current = _parse(out)
            results += done
            if len(done) < count:          # hung or died at case `current`
                at = current if current is not None else first
                results.append({"format": fmt, "seed": seed, "index": at, "code": -1, "seconds": None,
                                "problems": [f"driver died or hung (exit {proc.returncode}): {err[-500:]}"]})
                if at + 1 < first + count:
                    pending.append((at + 1, first + count - at - 1))
    return sorted(results, key=lambda r: r["index"])


def _read(file) -> str:
    file.seek(0)
    text = file.read()
    file.close()
    return text


def _parse(out: str) -> tuple[list[dict], int | None]:
    done, current = [], None
    for line in out.splitlines():
        try:
            row = json.loads(line)
        except ValueError:          # the last line of a batch killed while writing it
            continue
        if "start" in row:
            current = row["start"]
        else:
            done.append(row)
    return done, current


def main(argv: list[str]) -> int:
    import argparse
    parser = argparse.ArgumentParser(description="tracelens hostile-input fuzzer")
    parser.add_argument("n", type=int, nargs="?", default=5000, help="cases per format")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--jobs", type=int, default=max(1, len(os.sched_getaffinity(0))))
    parser.add_argument("--format", choices=FORMATS, action="append")
    args = parser.parse_args(argv)
    n, seed, jobs = args.n, args.seed, args.jobs
    bad = 0
    for fmt in args.format or FORMATS:
        t0 = time.monotonic()
        rows = run_batches(fmt, seed, n, jobs)
        seconds = time.monotonic() - t0
        failed = [r for r in rows if r["problems"]]
        codes = {c: sum(r["code"] == c for r in rows) for c in sorted({r["code"] for r in rows})}
        print(f"{fmt}: {len(rows)} cases (seed {seed}) in {seconds:.0f} s on {jobs} jobs; exit codes {codes}; "
              f"{len(failed)} finding(s)")
        if failed:
            folder = HERE / "findings"
            folder.mkdir(exist_ok=True)
            for r in failed:
                name = folder / f"{fmt}-{seed}-{r['index']}.json"
                name.write_text(json.dumps(r, indent=1) + "\n")
                print(f"  {name.name}: {r['problems'][0][:200]}")
        bad += len(failed)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
