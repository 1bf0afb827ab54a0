"""The golden cases: every bundled sample and every synthetic scenario, rendered four ways.

A case's renderings are committed under ``tests/golden/<case>/`` (report.json, text-80.txt, text-120.txt,
report.md); ``make goldens`` rewrites them, so a changed number shows in review as a diff. Paths in the
reports are relative to the project root (the cases are read from there), so they are the same on every
machine.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
SAMPLES = ROOT / "sample_traces"
# Synthetic scenarios are written here first (ignored by git): same bytes every time, same relative paths.
BUILD = GOLDEN / "_build"
WIDTHS = (80, 120)
_written: set[str] = set()   # scenarios written by this process (never trust a folder left by an older generator)
# The test session's id, the same in every pytest-xdist worker: a folder written in this session by another
# worker is reused, never rewritten under it while that worker reads it.
_SESSION = os.environ.get("PYTEST_XDIST_TESTRUNUID")
_MARK = ".written-by"


def sample_cases() -> list[str]:
    return sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


def synthetic_cases() -> list[str]:
    from fixtures import synth

    bundled = set(sample_cases())      # scenarios already bundled as samples are not repeated
    return [f"synth_{name}" for name in synth.SCENARIOS if name not in bundled]


# `tracelens diff` of a BEFORE and an AFTER run: a real re-run (the 40 ms slow rank removed: the recordings
# nearest their configuration's median in bench/RESULTS.md, "Predictions against re-runs") and a generated
# pair with exact truth (rank 5 of 8 late by 3 ms for a host gap, then on time).
RECORDINGS = "tests/fixtures/recordings"
DIFFS = {"diff_gloo_slow40": (f"{RECORDINGS}/gloo_slow40", f"{RECORDINGS}/gloo_baseline"),
         "diff_synth_late_rank": ("synth_culprit_host_gap", "synth_culprit_host_gap_on_time")}


# A run known from NCCL Inspector logs alone: the generated logs of a scenario (eight ranks, rank 5 late by
# 3 ms at every step), reported without its traces: what the logs say across ranks, and overlap unknown.
INSPECTOR = {"inspector_culprit_host_gap": "culprit_host_gap",
             # The slow-link scenario's logs (eight ranks on four hosts, three subgroups, one of them slow): the
             # slow link named from the logs alone.
             "inspector_slow_link": "slow_link"}
# The same run's logs of all eight ranks beside the Kineto traces of ranks 0-3: the late rank, 5, has no trace.
# Overlap from the four traces, waits and the late rank from every rank.
TRACED = {"inspector_mixed_culprit_host_gap": ("culprit_host_gap", [0, 1, 2, 3])}


def all_cases() -> list[str]:
    return sample_cases() + synthetic_cases() + sorted(DIFFS) + sorted(INSPECTOR) + sorted(TRACED)


@contextmanager
def _at_root():
    old = os.getcwd()
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(old)


def _input(case: str) -> str:
    if case.startswith(RECORDINGS):
        return case
    if case.startswith("synth_"):
        import dataclasses

        from fixtures import synth

        name = case.removeprefix("synth_")
        base = name.removesuffix("_on_time")
        sc = synth.SCENARIOS[base]
        out = _once(name, lambda out: synth.write(sc if base == name else
                                                  dataclasses.replace(sc, name=name, culprit_ns=0), out))
        return str(out.relative_to(ROOT))
    return str((SAMPLES / case).relative_to(ROOT))


def _once(name: str, write) -> Path:
    """``BUILD/name``, written by ``write`` once in this process (or, under pytest-xdist, once in this test
    session: the workers take turns under a lock, and the first one's folder is everyone's)."""
    out = BUILD / name
    if name in _written:
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(BUILD / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        mark = out / _MARK
        if _SESSION is None or not mark.is_file() or mark.read_text() != _SESSION:
            shutil.rmtree(out, ignore_errors=True)
            write(out)
            if _SESSION is not None:
                mark.write_text(_SESSION)
    _written.add(name)
    return out


def render_case(case: str) -> dict[str, str]:
    """File name -> contents of every rendering of one case, made through the library API."""
    import tracelens
    from tracelens.renderers import render

    if case in DIFFS:
        return _render_diff(*DIFFS[case])
    with _at_root():
        rep = _logs_report(case) if case in INSPECTOR or case in TRACED else \
            tracelens.analyze(tracelens.load(_input(case)))
    out = {"report.json": render(rep, "json"), "report.md": render(rep, "markdown")}
    for width in WIDTHS:
        out[f"text-{width}.txt"] = render(rep, "text", color=False, width=width)
    return out


def _logs_report(case: str):
    import tracelens
    from fixtures import synth
    from fixtures.synth.inspector import write_inspector

    name, traced = TRACED.get(case, (INSPECTOR.get(case), None))

    def write(out: Path) -> None:
        write_inspector(synth.SCENARIOS[name], out)
        if traced is not None:
            synth.write(synth.SCENARIOS[name], out, ranks=traced)

    out = _once(case, write)
    return tracelens.api.report([str(out.relative_to(ROOT))], cache=False)


def _render_diff(before: str, after: str) -> dict[str, str]:
    import tracelens
    from tracelens.renderers.diff_tables import render_diff

    with _at_root():
        d = tracelens.api.diff(_input(before), _input(after))
    out = {"diff.json": render_diff(d, "json"), "diff.md": render_diff(d, "markdown")}
    for width in WIDTHS:
        out[f"text-{width}.txt"] = render_diff(d, "text", color=False, width=width)
    return out
