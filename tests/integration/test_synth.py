"""Generator ground truth: the report equals the timing model to the nanosecond."""

import gzip
import json
import sqlite3
import subprocess
import sys

import pytest

import tracelens

from conftest import ROOT, SAMPLES
from fixtures import synth

METRICS = ("step", "start_ns", "end_ns", "duration_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns",
           "idle_ns")


def report_for(sc, tmp_path):
    synth.write(sc, tmp_path)
    return tracelens.analyze(tracelens.load(str(tmp_path)))


@pytest.mark.parametrize("name", sorted(synth.SCENARIOS))
def test_report_equals_generator_truth(name, tmp_path):
    sc = synth.SCENARIOS[name]
    rep = report_for(sc, tmp_path)
    truth = synth.expected(sc)
    assert [r.rank for r in rep.ranks] == list(range(sc.ranks))
    for r in rep.ranks:
        got = [{k: getattr(s, k) for k in METRICS} for s in r.steps]
        assert got == truth[r.rank]
        assert r.totals.exposed_comm_ns == sum(s["exposed_comm_ns"] for s in truth[r.rank])
    # A clean synthetic run has nothing to warn about but the work a pipelined one launched before the capture,
    # and, in the legacy era (no process group in the trace), the stream-order matching of every collective.
    pre = synth.pre_capture_truth(sc)
    # A scenario with a mismatched collective warns once, counting the collectives of every rank from the
    # mismatched one to the last (seq order), which are left unmatched.
    fallback = [("match-fallback", None, sc.ranks * sc.steps * len(sc.buckets))] if sc.era == "legacy" else []
    if sc.mismatch:
        left = sc.steps * len(sc.buckets) - sc.seq_of(*sc.mismatch[1:])
        fallback.append(("collective-mismatch", None, left * sc.ranks))
    assert [(w.code, w.rank, w.count) for w in rep.warnings] == [
        ("launched-before-capture", r, pre[r]["kernels"]) for r in range(sc.ranks) if pre[r]] + fallback


@pytest.mark.parametrize("name, exposed_ms, comm_ms", [
    # metrics.md §6 worked examples (per step): comm-bound 100 buckets exposes 2.1 of 12 ms,
    # one bucket exposes all 12 ms, compute-bound 8 buckets exposes only the last 0.5 of 4 ms.
    ("wfbp_100", 2.1, 12.0), ("one_bucket", 12.0, 12.0), ("compute_bound_8", 0.5, 4.0),
])
def test_metrics_md_worked_examples(name, exposed_ms, comm_ms, tmp_path):
    rep = report_for(synth.SCENARIOS[name], tmp_path)
    for r in rep.ranks:
        for s in r.steps:
            assert s.exposed_comm_ns == round(exposed_ms * 1e6)
            assert s.comm_ns == round(comm_ms * 1e6)
            assert s.overlap_pct == pytest.approx(100 * (comm_ms - exposed_ms) / comm_ms)


def test_serialized_comm_is_never_hidden(tmp_path):
    # Comm kernels sit on the compute stream between backward kernels: 8 × 0.4 ms per step, all exposed.
    rep = report_for(synth.SCENARIOS["serialized"], tmp_path)
    for s in rep.ranks[0].steps:
        assert s.overlap_ns == 0 and s.exposed_comm_ns == 8 * 400_000 and s.overlap_pct == 0.0


def test_clock_offsets_do_not_change_metrics(tmp_path):
    # Ranks 0-2 of "straggler" run the same work with different clock offsets (250_001, -99_999 ns).
    rep = report_for(synth.SCENARIOS["straggler"], tmp_path)
    r0, r1, r2, r3 = rep.ranks
    strip = lambda r: [(s.duration_ns, s.compute_ns, s.comm_ns, s.overlap_ns) for s in r.steps]  # noqa: E731
    assert strip(r0) == strip(r1) == strip(r2)
    assert r1.steps[0].start_ns - r0.steps[0].start_ns == 250_001
    assert r3.totals.compute_ns > r0.totals.compute_ns  # the slowed rank computes 1.3x longer


def test_collectives_carry_size_and_exposure(tmp_path):
    sc = synth.SCENARIOS["one_bucket"]
    rep = report_for(sc, tmp_path)
    colls = [c for c in rep.collectives if c.rank == 0]
    assert len(colls) == sc.steps
    for c in colls:
        # 25 MiB bucket of float (generator setting), nothing hidden: exposed = duration = 12 ms.
        assert c.op == "all_reduce" and c.bytes == 25 * 2**20
        assert c.exposed_ns == c.duration_ns == 12_000_000


@pytest.mark.parametrize("folder", sorted(p.name for p in SAMPLES.iterdir() if (p / synth.EXPECTED_FILE).exists()))
def test_bundled_samples_match_their_truth(folder):
    truth = json.loads((SAMPLES / folder / synth.EXPECTED_FILE).read_text())
    scenario = truth["scenario"]
    assert folder in (scenario, f"nsys_{scenario}")  # nsys_<name>: the same run as an nsys export
    assert truth == {"scenario": scenario, "ranks": {str(k): v for k, v in
                                                     synth.expected(synth.SCENARIOS[scenario]).items()}}
    rep = tracelens.analyze(tracelens.load(str(SAMPLES / folder)))
    for r in rep.ranks:
        assert [{k: getattr(s, k) for k in METRICS} for s in r.steps] == truth["ranks"][str(r.rank)]


def _content(path):
    """What a sample file holds, independent of the zlib and SQLite builds that wrote it: the JSON of a gzip
    trace, the SQL dump of an export, the bytes of anything else."""
    if path.name.endswith(".gz"):
        return json.loads(gzip.decompress(path.read_bytes()))
    if path.suffix == ".sqlite":
        con = sqlite3.connect(path)
        try:
            return list(con.iterdump())
        finally:
            con.close()
    return path.read_bytes()


def test_make_samples_regenerates_the_bundled_samples(tmp_path):
    # `make samples` runs scripts/make_samples.py: into an empty folder it must write every generated sample
    # folder of sample_traces/ (those with a metrics.expected), file for file, with the committed content.
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_samples.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    generated = sorted(p.name for p in SAMPLES.iterdir() if (p / synth.EXPECTED_FILE).exists())
    assert sorted(p.name for p in tmp_path.iterdir()) == generated
    for folder in generated:
        files = sorted(p.name for p in (SAMPLES / folder).iterdir())
        assert sorted(p.name for p in (tmp_path / folder).iterdir()) == files
        for name in files:
            assert _content(tmp_path / folder / name) == _content(SAMPLES / folder / name), f"{folder}/{name}"
