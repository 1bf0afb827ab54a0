"""The analyze_rank -> combine seam: a rank's analysis is small and self-contained, and combine gives the same
Report whatever order the analyses come in, and after they were pickled (as a worker process or a cluster
would send them)."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pandas as pd
import pytest

import tracelens
from tracelens.analyzers import Context, RankAnalysis, Thresholds, analyze, analyze_rank, combine
from tracelens.analyzers.seam import COMM_COLUMNS
from tracelens.model.table import Labels, Table

from conftest import SAMPLES, corpus_file

CASES = ["straggler", "nsys_wfbp_100", "gloo_sawtooth", "cuda_nccl_item"]


def _walk(obj, seen=None):
    """Every object reachable from a RankAnalysis through its fields, lists and dicts."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    children = []
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    elif hasattr(obj, "__dict__"):
        children = list(vars(obj).values())
    elif hasattr(obj, "__struct_fields__"):
        children = [getattr(obj, f) for f in obj.__struct_fields__]
    for c in children:
        yield from _walk(c, seen)


@pytest.mark.parametrize("case", CASES)
def test_combine_in_any_order_and_after_pickling_gives_the_same_report(case):
    traces = tracelens.load(str(SAMPLES / case))
    ctx = Context(Thresholds())
    want = analyze(traces).to_json()
    analyses = [analyze_rank(t, ctx) for t in traces]
    for seed in range(3):
        shuffled = analyses[:]
        random.Random(seed).shuffle(shuffled)
        assert combine(list(reversed(shuffled)), ctx).to_json() == want
    restored = pickle.loads(pickle.dumps(analyses))
    assert combine(restored[::-1], ctx).to_json() == want


def test_a_rank_analysis_holds_no_trace_table():
    (t,) = tracelens.load(str(corpus_file("hta/df_index_resolver/df_index_resolver.json.gz")))
    a = analyze_rank(t)
    kinds = {type(o) for o in _walk(a)}
    assert not any(issubclass(k, (pd.DataFrame, pd.Series, pd.Categorical, Table, Labels, tracelens.RankTrace))
                   for k in kinds), kinds
    # The rank's tables take 11.6 MB (216 k events); its analysis, what the Report holds plus the collective
    # instances, pickles to 0.24 MB (both measured): bounded here at 1/10 of the tables.
    tables = sum(f.nbytes for f in (t.device_ops, t.host_ops, t.collectives))
    assert len(pickle.dumps(a)) < tables / 10


def test_the_collective_table_lines_up_with_the_reported_collectives():
    traces = tracelens.load(str(SAMPLES / "wfbp_100"))
    for t in traces:
        a = analyze_rank(t)
        assert isinstance(a, RankAnalysis) and list(a.comm) == list(COMM_COLUMNS)
        n = len(a.collectives)
        assert n == 300 and all(v.shape == (n,) for v in a.comm.values())   # 100 buckets × 3 steps (generator)
        assert a.comm["start_ns"].tolist() == [c.start_ns for c in a.collectives]
        assert (a.comm["end_ns"] - a.comm["start_ns"]).tolist() == [c.duration_ns for c in a.collectives]
        assert set(a.comm["op"].tolist()) == {"all_reduce"}
        assert np.all(a.comm["bytes"] == [c.bytes for c in a.collectives])
