"""Column helpers: the fast paths must give what the plain numpy/pandas calls give."""

import re

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tracelens.model.columns import distinct, group_rows, mask, matches, median, percentile, remembered, unique_rows

small = st.integers(-3, 40)
wide = st.sampled_from([-(2**62), -5, 0, 7, 2**40, 2**62 - 1])   # spans that cannot be packed into one int64


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4).flatmap(lambda k: st.one_of(
    hnp.arrays(np.int64, st.tuples(st.integers(0, 30), st.just(k)), elements=small),
    hnp.arrays(np.int64, st.tuples(st.integers(0, 30), st.just(k)), elements=wide))))
def test_unique_rows_is_numpys_axis0_unique(keys):
    uniq, first, inverse = unique_rows(keys)
    want_u, want_f, want_i = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    assert uniq.tolist() == want_u.tolist()
    assert first.tolist() == want_f.tolist()
    assert inverse.tolist() == want_i.reshape(-1).tolist()


_values = st.sampled_from(["tp", "dp", "", None, float("nan")])


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 30).flatmap(lambda n: st.tuples(
    st.lists(_values, min_size=n, max_size=n), st.lists(_values, min_size=n, max_size=n),
    hnp.arrays(np.int64, n, elements=st.integers(-1, 3)))))
def test_group_rows_is_pandas_groupby_indices(cols):
    # The reference is what dimensions.attribute used before: groupby(dropna=False, sort=False), NaN keys read
    # as None, in the order its iteration gives the groups, which pandas documents as first appearance (the
    # order of its `.indices` dict is not: before pandas 3.1 it differs with several keys).
    a, b, size = cols
    frame = pd.DataFrame({"a": pd.Series(a, dtype=object), "b": pd.Series(b, dtype=object), "size": size})
    want = [(tuple(None if isinstance(v, float) and v != v else v for v in key[:2]) + (int(key[2]),),
             frame.index.get_indexer(group.index).tolist())
            for key, group in frame.groupby(["a", "b", "size"], dropna=False, sort=False)]
    got = [((k[0], k[1], int(k[2])), rows.tolist())
           for k, rows in group_rows(np.array(a, dtype=object), np.array(b, dtype=object), size)]
    assert got == want


def test_remembered_asks_once_per_name():
    asked = []
    test = remembered(lambda name: asked.append(name) or name.startswith("nccl"), bound=3)
    assert [test(n) for n in ("ncclKernel", "gemm", "ncclKernel", "gemm")] == [True, False, True, False]
    assert asked == ["ncclKernel", "gemm"]
    for n in ("a", "b"):        # past the bound the memory starts afresh: still right, asked again
        test(n)
    assert test("ncclKernel") is True and asked[-1] == "ncclKernel" and len(asked) == 5


def test_matches_keeps_each_pattern_apart():
    # One name under two patterns and two modes: the remembered answers must not leak between them.
    col = pd.Categorical(["ncclDevKernel_AllReduce", "at::gemm", None])
    assert matches(col, r"nccl").tolist() == [True, False, False]
    assert matches(col, r"gemm").tolist() == [False, False, False]          # "match": anchored at the start
    assert matches(col, r"gemm", "search").tolist() == [False, True, False]
    assert matches(col, re.compile(r"AllReduce"), "search").tolist() == [True, False, False]


def test_mask_reads_each_row_through_its_category():
    # Names only (the model's columns), then a category that is no string: it never passes a string test.
    names = pd.Categorical(["nccl:all_reduce", "aten::mm", None, "nccl:send", "aten::mm"])
    assert mask(names, lambda n: n.startswith("nccl:")).tolist() == [True, False, False, True, False]
    mixed = pd.Categorical(["nccl:x", 7, None, "y"], categories=pd.Index([7, "nccl:x", "y"], dtype=object))
    assert mask(mixed, lambda n: n.startswith("nccl:")).tolist() == [True, False, False, False]


# Numbers as the reports hold them: int64 ns and byte counts (past 2**53 too), float bandwidths, ties.
_numbers = st.one_of(
    hnp.arrays(np.int64, st.integers(1, 40), elements=st.integers(-(2**62), 2**62)),
    hnp.arrays(np.int64, st.integers(1, 40), elements=st.integers(0, 4)),
    hnp.arrays(np.float64, st.integers(1, 40), elements=st.floats(0, 1e12, allow_nan=False)),
    hnp.arrays(np.float64, st.integers(1, 40), elements=st.sampled_from([0.5, 1.0, 3.25, float("nan")])))
_q = st.one_of(st.floats(0, 100), st.integers(0, 100), st.lists(st.floats(0, 100), min_size=1, max_size=4))


@settings(max_examples=500, deadline=None)
@given(_numbers, _q)
def test_percentile_is_numpys_to_the_bit(values, q):
    want, got = np.percentile(values, q), percentile(values, q)
    assert type(got) is type(want)
    np.testing.assert_array_equal(got, want)           # NaN equal to NaN, nothing else tolerated
    assert np.asarray(got).dtype == np.asarray(want).dtype


@settings(max_examples=500, deadline=None)
@given(_numbers)
def test_median_is_numpys_to_the_bit(values):
    want, got = np.median(values), median(values)
    assert type(got) is type(want)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=300, deadline=None)
@given(st.one_of(hnp.arrays(np.int64, st.integers(0, 40), elements=st.integers(-5, 5)),
                 st.lists(st.sampled_from(["nccl", "gloo", "", "all_reduce"]), max_size=20).map(
                     lambda v: np.array(v, dtype=object))))
def test_distinct_is_numpys_unique(values):
    want, got = np.unique(values), distinct(values)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
