"""Regenerate the generated samples of ``sample_traces/`` (``make samples``), or write one scenario anywhere.

    python scripts/make_samples.py [--out DIR]         # every generated sample, into DIR (default sample_traces/)
    python scripts/make_samples.py [--nsys] NAME DIR   # one scenario of tests/fixtures/synth, Kineto or nsys

The generator is a test fixture, not part of the installed package: this script puts ``tests/`` on the path.
The output is the same bytes on every run (gzip without a timestamp, rows in a fixed order), so after
``make samples`` git shows no change unless the generator changed. The recorded samples (gloo_*, cuda_*)
are real runs: ``examples/record_samples.py`` re-records them.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fixtures import synth  # noqa: E402

# Folder under sample_traces/ -> (scenario, format, one file for all ranks).
SAMPLES = {
    "wfbp_100": ("wfbp_100", "kineto", False),
    "one_bucket": ("one_bucket", "kineto", False),
    "compute_bound_8": ("compute_bound_8", "kineto", False),
    "serialized": ("serialized", "kineto", False),
    "legacy_wfbp": ("legacy_wfbp", "kineto", False),
    "straggler": ("straggler", "kineto", False),
    "nsys_wfbp_100": ("wfbp_100", "nsys", True),
}


def write_one(name: str, out: Path, fmt: str = "kineto", one_file: bool = False) -> list[Path]:
    sc = synth.SCENARIOS[name]
    return synth.write_nsys(sc, out, per_rank=not one_file) if fmt == "nsys" else synth.write(sc, out)


def write_samples(out: Path) -> list[Path]:
    """Every generated sample folder, rewritten from scratch (a file left by an older generator goes)."""
    paths = []
    for folder, (name, fmt, one_file) in SAMPLES.items():
        shutil.rmtree(out / folder, ignore_errors=True)
        paths += write_one(name, out / folder, fmt, one_file)
    return paths


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nsys", action="store_true", help="write Nsight Systems SQLite exports (one per rank)")
    ap.add_argument("--out", type=Path, default=ROOT / "sample_traces", help="where the samples go")
    ap.add_argument("scenario", nargs="*", metavar="NAME DIR", help=f"one of {', '.join(synth.SCENARIOS)}, and a folder")
    args = ap.parse_args(argv)
    if not args.scenario:
        if args.nsys:
            ap.error("--nsys needs NAME DIR")
        paths = write_samples(args.out)
    elif len(args.scenario) == 2 and args.scenario[0] in synth.SCENARIOS:
        paths = write_one(args.scenario[0], Path(args.scenario[1]), "nsys" if args.nsys else "kineto")
    else:
        ap.error(f"expected NAME DIR with NAME one of {', '.join(synth.SCENARIOS)}")
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
