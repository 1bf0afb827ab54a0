"""The model's numpy tables give what the pandas calls they replace gave (pandas is the reference here, and
only here: no report imports it)."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelens.model.columns import categorical, factorize, isin, mask
from tracelens.parsers.assemble import _int64
from tracelens.parsers.collective_rows import present as _present
from tracelens.model.table import Labels, Table, objects

_names = st.sampled_from(["gemm", "nccl:all_reduce", "ncclDevKernel", "", "Memcpy HtoD", None])
_any = st.one_of(_names, st.just(float("nan")), st.integers(-3, 3))


@settings(max_examples=300, deadline=None)
@given(st.lists(_names, max_size=40))
def test_categorical_is_pandas_categorical(values):
    got = categorical(values)
    want = pd.Categorical(pd.Series(values, dtype=object))
    assert got.categories.tolist() == want.categories.tolist()        # sorted, as pandas sorts
    assert got.codes.tolist() == want.codes.tolist()
    assert got.tolist() == [v if isinstance(v, str) else None for v in values]


@settings(max_examples=300, deadline=None)
@given(st.lists(_any, max_size=40))
def test_factorize_is_pandas_factorize(values):
    codes, uniques = factorize(objects(values))
    want_codes, want_uniques = pd.factorize(objects(values), use_na_sentinel=True)
    assert codes.tolist() == want_codes.tolist()
    assert uniques == list(want_uniques)


@settings(max_examples=200, deadline=None)
@given(st.lists(_names, max_size=30), st.sampled_from(["gemm", "ncclDevKernel", "absent", ""]),
       st.lists(st.integers(0, 29), max_size=10))
def test_labels_compare_pick_and_read_as_a_pandas_categorical(values, probe, rows):
    lab = categorical(values)
    ref = pd.Series(pd.Categorical(pd.Series(values, dtype=object)))
    assert (lab == probe).tolist() == (ref == probe).tolist()
    assert (lab != probe).tolist() == (ref != probe).tolist()
    assert lab.isin([probe, "gemm"]).tolist() == ref.isin([probe, "gemm"]).tolist()
    assert isin(lab, [probe]).tolist() == ref.isin([probe]).tolist()
    assert mask(lab, lambda n: n.startswith("nccl")).tolist() == \
        ref.astype(object).map(lambda n: isinstance(n, str) and n.startswith("nccl")).tolist()
    rows = [r for r in rows if r < len(values)]
    picked = lab[np.array(rows, dtype=np.int64)]
    assert picked.tolist() == [None if (v := ref.iloc[r]) != v else v for r in rows]
    assert lab.unique() == sorted({v for v in values if v is not None})
    assert len(lab) == len(values) and list(lab) == lab.tolist()
    if len(values):
        assert lab[0] == (values[0] if values[0] is not None else None)


def test_a_table_reads_picks_sorts_and_becomes_a_dataframe():
    t = Table({"start_ns": np.array([30, 10, 20], dtype=np.int64),
               "name": Labels(np.array([1, -1, 0]), ["gemm", "nccl"]),
               "op": np.array(["all_reduce", None, "broadcast"], dtype=object)})
    assert len(t) == 3 and t.columns == ["start_ns", "name", "op"] and not t.empty
    s = t.sort_by("start_ns")
    assert s["start_ns"].tolist() == [10, 20, 30] and s["name"].tolist() == [None, "gemm", "nccl"]
    assert t[t["start_ns"] > 15]["op"].tolist() == ["all_reduce", "broadcast"]
    frame = t.to_pandas()
    assert frame["name"].dtype == "category" and frame["name"].tolist()[0] == "nccl"
    assert pd.isna(frame["name"].tolist()[1]) and frame["op"].dtype == object
    assert frame["start_ns"].dtype == np.int64
    with pytest.raises(ValueError, match="column 'b' has 1 rows, the table 2"):
        Table({"a": [1, 2], "b": [1]})


def test_strings_from_numpy_are_python_strings():
    # A fixed-width numpy string column (thread names) must hold str, not np.str_: the cache keeps str only.
    t = Table({"name": np.array(["main", "thread 2"])})
    assert t["name"].dtype == object and [type(v) for v in t["name"].tolist()] == [str, str]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**53, 2**53), st.floats(allow_nan=True, allow_infinity=True, width=64),
                          st.sampled_from(["12", "x", "", None, "1e3", "-7"])), max_size=20))
def test_int64_is_pandas_to_numeric_coerced(values):
    # The reference is what assembly did before: to_numeric(errors="coerce"), missing -> -1, then int64
    # (pandas raises on values past int64 after coercion; those are -1 here, as a missing value is).
    arr = objects(values)
    got = _int64(arr)
    num = pd.to_numeric(pd.Series(arr), errors="coerce")
    fits = num.isna() | (num.abs() < 2.0**63)
    want = num.where(fits).fillna(-1)
    assert got.dtype == np.int64
    assert got.tolist() == [int(w) for w in want.tolist()]
    assert _present(arr).tolist() == pd.notna(arr).tolist()


def test_int64_keeps_integers_pandas_would_round():
    # 2**53 + 1 has no float64: pandas' to_numeric gave 2**53 for it; a trace's id must stay itself.
    assert _int64(objects([2**53 + 1, 2**63 - 1, "7", 2.5, 2**64])).tolist() == [2**53 + 1, 2**63 - 1, 7, 2, -1]
