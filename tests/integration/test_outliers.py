"""Collective outliers: slow instances injected into generated runs are found, with their cause and the rank
named; clean runs and the corpus's real traces raise none without a cause that can be named."""

from __future__ import annotations

import dataclasses

import pytest

import tracelens
from tracelens.analyzers import Thresholds

from conftest import CORPUS_TRACES, corpus_file
from fixtures import synth
from fixtures.findings import of, run, write

MS = 1_000_000
# Four ranks, twenty steps, 80 equal all-reduces of one kind, each 1 ms when nothing is injected (no jitter:
# the generator's durations).
CLEAN = synth.OUTLIER_RUN


def _outliers(sc, tmp_path, fmt="kineto"):
    return of(run(write(sc, tmp_path, fmt)), "outlier")


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_a_clean_run_has_no_outliers(fmt, tmp_path):
    assert _outliers(CLEAN, tmp_path, fmt) == []


def test_a_slow_transfer_is_found_on_every_member(tmp_path):
    # Injected: step index 7 (step 9: first_step 2), bucket 2's all-reduce takes 10 ms more on every rank.
    sc = dataclasses.replace(CLEAN, name="outliers_transfer", slow_transfer={(7, 2): 10 * MS})
    rep = run(write(sc, tmp_path))
    (d,) = of(rep, "outlier")
    # The outliers view's series: all 80 instances in order of start, 1 ms each but the injected one.
    (kind,) = rep.outliers
    assert (kind.op, kind.matched, len(kind.duration_ns), kind.median_ns) == ("all_reduce", True, 80, 1 * MS)
    marked = [i for i, c in enumerate(kind.cause) if c]
    assert marked == [7 * 4 + 2] and kind.cause[marked[0]] == "transfer" and kind.step[marked[0]] == 9
    assert sorted(set(kind.duration_ns)) == [1 * MS, 11 * MS] and kind.start_ns == sorted(kind.start_ns)
    ev = d.evidence
    assert (ev["op"], ev["bytes_min"], ev["bytes_max"], ev["instances"]) == ("all_reduce", 25 * 2**20, 25 * 2**20, 80)
    assert ev["outliers"] == 1 and ev["causes"] == {"transfer": 1}
    assert ev["median_ns"] == 1 * MS                            # generator: every other instance 1 ms
    w = ev["worst"]
    assert w["step"] == 9 and w["cause"] == "transfer"
    assert w["transfer_ns"] == 11 * MS and w["excess_ns"] == 10 * MS
    assert d.evidence["worst"]["cause"] == "transfer" and "transfer itself was slow" in d.advice


def test_a_late_rank_is_named_for_the_wait(tmp_path):
    # Injected: in step index 12 (step 14) rank 3's backward kernel of bucket 0 runs 8 ms longer: it comes
    # 8 ms late to bucket 0's all-reduce, and as late to the step's three later buckets (its kernels after
    # it are shifted), so the other three ranks wait about 8 ms in each.
    sc = dataclasses.replace(CLEAN, name="outliers_late", late_compute={(12, 0): (3, 8 * MS)})
    (d,) = _outliers(sc, tmp_path)
    ev = d.evidence
    assert ev["causes"] == {"wait": ev["outliers"]} and 1 <= ev["outliers"] <= 4
    assert ev["late_ranks"] == {3: ev["outliers"]}
    w = ev["worst"]
    assert (d.rank, d.step, w["rank"], w["step"], w["late_rank"]) == (3, 14, 3, 14, True)
    assert w["wait_ns"] == pytest.approx(8 * MS, rel=0.01)    # the injected lateness
    assert w["transfer_ns"] == 1 * MS                          # the transfer was as usual
    assert d.evidence["worst"]["cause"] == "wait" and "open rank 3 at step 14" in d.advice


def test_both_injections_in_one_run(tmp_path):
    sc = dataclasses.replace(CLEAN, name="outliers_both", slow_transfer={(4, 1): 6 * MS},
                             late_compute={(15, 2): (1, 5 * MS)})
    (d,) = _outliers(sc, tmp_path)
    ev = d.evidence
    assert ev["causes"]["transfer"] == 1 and ev["causes"]["wait"] >= 1
    steps = {(x["step"], x["cause"]) for x in ev["listed"]}
    assert (6, "transfer") in steps and (17, "wait") in steps   # step = index + first_step 2
    assert set(ev["late_ranks"]) == {1}


def test_thresholds_decide(tmp_path):
    # A 10 ms excess is within a 20 ms floor: no alarm.
    sc = dataclasses.replace(CLEAN, name="outliers_floor", slow_transfer={(7, 2): 10 * MS})
    rep = run(write(sc, tmp_path), Thresholds(outlier_min_excess_ns=20 * MS))
    assert of(rep, "outlier") == []
    # Fewer instances of a kind than the minimum group: no norm to be an outlier of.
    rep = run(write(sc, tmp_path / "b"), Thresholds(outlier_min_group=81))
    assert of(rep, "outlier") == []


def test_one_ranks_trace_cannot_split_wait_from_transfer(tmp_path):
    sc = dataclasses.replace(CLEAN, name="outliers_solo", slow_transfer={(7, 2): 10 * MS})
    paths = synth.write(sc, tmp_path / "solo", ranks=[0])
    (d,) = of(tracelens.analyze(tracelens.load([str(p) for p in paths])), "outlier")
    assert d.evidence["worst"]["cause"] == "unknown" and d.evidence["causes"] == {"unknown": 1}
    assert "report this rank's peers" in d.advice


# Checked by hand (their comm rows printed per step; tests/integration/test_outliers.py history): these two
# real single-rank traces have outliers, each with a cause their raw events name or honestly leave open.
def test_corpus_early_arrival_is_no_loss():
    # An MoE trace: the first all-to-all of steps 551 and 553 runs 5.8 ms where it runs 0.07-0.37 ms in the
    # other steps, and rank 0 reached it after a lead of 20.4 ms instead of its usual 26.0 ms: it came 5.5 ms
    # early and waited for its peers; nothing was lost.
    rep = run(corpus_file("hta/negative_queue_length_values_check/rank0.json.gz"))
    (d,) = of(rep, "outlier")
    ev = d.evidence
    assert d.evidence["worst"]["cause"] == "early" and ev["causes"] == {"early": 2}
    assert sorted(x["step"] for x in ev["listed"]) == [551, 553]
    assert d.severity == "info" and d.advice == ""


def test_corpus_slow_step_left_open():
    # A DDP trace of one rank: in step 6 its first three all-reduces run 5.8-6.0 ms where they run 2.2-3.3 ms
    # in steps 4 and 5, with the same lead: a late peer or a slow transfer, which one rank cannot tell.
    rep = run(corpus_file("hta/nccl_parser_config/nccl_data.json.gz"))
    (d,) = of(rep, "outlier")
    assert d.evidence["worst"]["cause"] == "unknown" and {x["step"] for x in d.evidence["listed"]} == {6}


def test_the_corpus_outliers_are_the_checked_ones():
    # Every corpus trace: outliers only where checked by hand above.
    got = {}
    for rel in CORPUS_TRACES:
        rep = tracelens.analyze(tracelens.load(str(corpus_file(rel))))
        found = {(d.evidence["worst"]["cause"], x["step"]) for d in of(rep, "outlier") for x in d.evidence["listed"]}
        if found:
            got[rel] = found
    assert got == {"hta/negative_queue_length_values_check/rank0.json.gz": {("early", 551), ("early", 553)},
                   "hta/nccl_parser_config/nccl_data.json.gz": {("unknown", 6)}}
