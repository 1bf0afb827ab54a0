"""Reading the model's string columns without converting them row by row.

Name columns are categoricals: 10^5 rows over a few thousand distinct names. A string test is evaluated
once per distinct name and spread to the rows through the codes; a row's string is looked up through its
code only for the rows that need one. (pandas' ``.str`` methods on a categorical materialise a string per
row, which costs tens of milliseconds on a large trace.) A test the analyzers run on every rank
(:func:`matches`, or wrapped in :func:`remembered`) is evaluated once per distinct name per process, since
the ranks of a run share their names. Object columns are built as object Series, since pandas would
otherwise infer its Arrow-backed string dtype and convert back and forth.
"""

from __future__ import annotations

import re
from typing import Callable, TypeVar

import numpy as np
import pandas as pd

from ._speed import frame_from_arrays

T = TypeVar("T")


def categorical_of(col) -> pd.Categorical | None:
    """The Categorical behind a column (a categorical Series or a Categorical), else None."""
    if isinstance(col, pd.Categorical):
        return col
    return col.array if isinstance(getattr(col, "dtype", None), pd.CategoricalDtype) else None


def mask(col, test: Callable[[str], object]) -> np.ndarray:
    """``bool(test(value))`` for every row (False for a missing value), once per distinct value.

    ``col``: a Series, a Categorical or an array (as every helper here)."""
    cat = categorical_of(col)
    if cat is not None:
        cats = cat.categories
        if cats.dtype == object and cats.inferred_type == "string":      # the model's names: no check per name
            hit = np.fromiter(map(test, cats.tolist()), bool, len(cats))
        else:
            hit = np.fromiter((bool(test(c)) if isinstance(c, str) else False for c in cats.tolist()), bool, len(cats))
        return np.append(hit, False)[cat.codes]   # code -1 (missing) reads the appended False
    return np.fromiter((isinstance(v, str) and bool(test(v)) for v in col.tolist()), bool, len(col))


def remembered(fn: Callable[[str], T], bound: int = 1 << 13) -> Callable[[str], T]:
    """``fn(name)``, remembered per name for the life of the process (``fn`` must be pure).

    The ranks of a run share their kernel and operator names, so a test over each rank's categories runs
    once per run instead of once per rank. Past ``bound`` names the memory starts afresh: it holds the
    names (kernel names run to a few KB), and a run has a few hundred to a few thousand distinct ones."""
    seen: dict[str, T] = {}

    def check(name: str) -> T:
        try:
            return seen[name]
        except KeyError:
            if len(seen) >= bound:
                seen.clear()
            hit = seen[name] = fn(name)
            return hit
    return check


def isin(col: pd.Series, values) -> np.ndarray:
    """``col.isin(values)`` as a bool array, tested once per distinct value."""
    wanted = frozenset(values)
    return mask(col, wanted.__contains__)


def matches(col: pd.Series, pattern: re.Pattern | str, how: str = "match") -> np.ndarray:
    """Regex test per row: ``how`` is "match" (at the start) or "search" (anywhere); each name's answer is
    remembered (:func:`remembered`), per pattern."""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    test = _TESTS.get((rx, how))
    if test is None:
        if len(_TESTS) >= 64:           # patterns built at run time (user input) do not pile up
            _TESTS.clear()
        find = rx.match if how == "match" else rx.search
        test = _TESTS[rx, how] = remembered(lambda name: find(name) is not None)
    return mask(col, test)


_TESTS: dict[tuple[re.Pattern, str], Callable[[str], object]] = {}


def frame_of(columns: dict) -> pd.DataFrame:
    """A DataFrame over the given columns, labelled by an object Index, object columns kept as objects.

    pandas 3's constructor infers its Arrow-backed string dtype for object arrays and labels (~1 ms for a
    few thousand strings, and the labels' lookup table is rebuilt through Arrow for every derived frame).
    The frame is assembled from arrays that are already typed, see :func:`tracelens._speed.frame_from_arrays`.
    """
    return frame_from_arrays([_array(v) for v in columns.values()], pd.Index(list(columns), dtype=object))


def _array(values):
    if isinstance(values, pd.Series):
        return values.array if isinstance(values.dtype, pd.api.extensions.ExtensionDtype) else values.to_numpy()
    if isinstance(values, (np.ndarray, pd.api.extensions.ExtensionArray)):
        return values
    out = np.asarray(values)
    return np.asarray(values, dtype=object) if out.dtype.kind in "USO" else out


def labels(codes: np.ndarray, names) -> pd.Categorical:
    """A categorical over distinct ``names`` by code (-1: missing), its categories an object Index.

    Categories in pandas 3's Arrow-backed string dtype are converted back to Python strings on every
    lookup, string test and union; object categories hold the strings as they are.
    """
    return pd.Categorical.from_codes(codes, categories=pd.Index(names, dtype=object))


def categorical(values) -> pd.Categorical:
    """Strings (None: missing) as a categorical with sorted object categories, as ``pd.Categorical`` sorts."""
    codes, uniques = pd.factorize(np.asarray(values, dtype=object), sort=True)
    return labels(codes, uniques)


def objects(values, index=None) -> pd.Series:
    """An object-dtype Series (None stays None; no string dtype inferred)."""
    return pd.Series(np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values,
                     dtype=object, index=index)


class Lookup:
    """``col[i]`` as a string ("" when missing), read through the categorical codes."""

    def __init__(self, col) -> None:
        cat = categorical_of(col)
        if cat is not None:
            cats = cat.categories
            # The model's categories are object Indexes of str already; astype(str) would go through
            # pandas 3's Arrow string dtype (~80 µs for a few hundred names).
            self._codes = cat.codes
            self._cats = cats.to_numpy(dtype=object) if cats.dtype == object and all(
                isinstance(c, str) for c in cats) else cats.astype(str).to_numpy()
        else:
            self._codes, self._cats = np.arange(len(col)), np.asarray(col, dtype=object).astype(str)

    def __getitem__(self, i: int) -> str:
        c = self._codes[i]
        return self._cats[c] if c >= 0 else ""

    def many(self, rows) -> list[str]:
        return [self[i] for i in rows]


def unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(keys, axis=0, return_index=True, return_inverse=True)`` for an int64 (rows, k) array,
    the inverse flat.

    Rows of small integers (ids, codes) are packed into one int64 each, most significant column first, so
    the order is the same lexicographic one; np.unique's axis=0 path sorts a structured view instead, ~1 ms
    even for a few thousand rows. Falls back to it when the packed key would not fit.
    """
    keys = np.asarray(keys, dtype=np.int64)
    n, k = keys.shape
    if n == 0:
        return keys, np.empty(0, np.int64), np.empty(0, np.int64)
    low = keys.min(axis=0)
    span = [int(hi) - int(lo) + 1 for lo, hi in zip(low.tolist(), keys.max(axis=0).tolist())]   # Python ints: no overflow
    if int(np.prod([float(x) for x in span])) < 2**62:
        packed = np.zeros(n, dtype=np.int64)
        for j in range(k):
            packed = packed * span[j] + (keys[:, j] - low[j])
        _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
        return keys[first], first, inverse.reshape(-1)
    uniq, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    return uniq, first, inverse.reshape(-1)


def group_rows(*columns) -> list[tuple[tuple, np.ndarray]]:
    """Rows grouped by their values in ``columns`` (equally long; None and NaN are one missing value, read
    as None): ``(values, rows)`` per group, groups in order of first appearance, rows ascending.

    What ``DataFrame(columns).groupby(..., dropna=False, sort=False).indices`` gives, without the frame and
    the groupby (~1.5 ms for a rank's few hundred collectives, most of it fixed cost).
    """
    n = len(columns[0]) if columns else 0
    if n == 0:
        return []
    codes, uniques = zip(*(pd.factorize(np.asarray(c, dtype=object) if not isinstance(c, np.ndarray)
                                        or c.dtype.kind not in "iub" else c) for c in columns))
    _, first, inverse = unique_rows(np.stack(codes, axis=1))
    rows = np.split(np.argsort(inverse, kind="stable"), np.cumsum(np.bincount(inverse))[:-1])
    out = []
    for g in np.argsort(first, kind="stable").tolist():
        at = first[g]
        out.append((tuple(None if c[at] < 0 else u[c[at]] for c, u in zip(codes, uniques)), rows[g]))
    return out

