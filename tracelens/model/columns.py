"""Reading the model's string columns without converting them row by row.

Name columns are :class:`~tracelens.model.table.Labels`: 10^5 rows over a few thousand distinct names. A string
test is evaluated once per distinct name and spread to the rows through the codes; a row's string is looked
up through its code only for the rows that need one (a string test per row costs tens of milliseconds on a
large trace). A test the analyzers run on every rank (:func:`matches`, or wrapped in :func:`remembered`) is
evaluated once per distinct name per process, since the ranks of a run share their names.

numpy only: a first report imports no pandas.
"""

from __future__ import annotations

import re
import sys
from typing import Callable, TypeVar

import numpy as np

from .table import Labels, distinct, objects

T = TypeVar("T")


def categorical_of(col) -> Labels | None:
    """The :class:`Labels` behind a column, else None (a pandas categorical, from a caller holding pandas
    objects, is read as Labels)."""
    if isinstance(col, Labels):
        return col
    pd = sys.modules.get("pandas")
    if pd is not None:
        if isinstance(col, pd.Series) and isinstance(col.dtype, pd.CategoricalDtype):
            col = col.array
        if isinstance(col, pd.Categorical):
            return Labels(col.codes, col.categories.to_numpy(dtype=object))
    return None


def mask(col, test: Callable[[str], object]) -> np.ndarray:
    """``bool(test(value))`` for every row (False for a missing value), once per distinct value.

    ``col``: Labels or an array (as every helper here)."""
    cat = categorical_of(col)
    if cat is not None:
        cats = cat.categories.tolist()
        if all(type(c) is str for c in cats):      # the model's names: no check per name
            hit = np.fromiter(map(test, cats), bool, len(cats))
        else:
            hit = np.fromiter((bool(test(c)) if isinstance(c, str) else False for c in cats), bool, len(cats))
        return np.append(hit, False)[cat.codes]   # code -1 (missing) reads the appended False
    return np.fromiter((isinstance(v, str) and bool(test(v)) for v in np.asarray(col, dtype=object).tolist()),
                       bool, len(col))


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


def isin(col, values) -> np.ndarray:
    """``col.isin(values)`` as a bool array, tested once per distinct value."""
    wanted = frozenset(values)
    return mask(col, wanted.__contains__)


def matches(col, pattern: re.Pattern | str, how: str = "match") -> np.ndarray:
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


def factorize(values) -> tuple[np.ndarray, list]:
    """Codes in order of first appearance (None and NaN: -1) and the distinct values, as
    ``pandas.factorize(values, use_na_sentinel=True)`` gives them, with a dict: the distinct values found
    in C (``dict.fromkeys``), the codes read in C (``map`` over the dict), well ahead of a Python loop."""
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    index = dict.fromkeys(items)
    uniques = []
    for k in index:
        if k is None or k != k:                 # missing: None, NaN
            index[k] = -1
        else:
            index[k] = len(uniques)
            uniques.append(k)
    return np.fromiter(map(index.__getitem__, items), np.int64, len(items)), uniques


def categorical(values) -> Labels:
    """Strings (None: missing) as Labels with sorted categories, as ``pd.Categorical`` sorts."""
    return sorted_labels(Labels(*factorize(objects(values))))


def sorted_labels(cat: Labels) -> Labels:
    """``cat`` with its categories in sorted order (the codes renumbered; missing stays missing)."""
    names = cat.categories
    listed = names.tolist()
    if all(a <= b for a, b in zip(listed, listed[1:])):
        return cat
    order = np.argsort(names.astype(str), kind="stable")
    rank = np.empty(len(order) + 1, dtype=np.int64)
    rank[order] = np.arange(len(order))
    rank[-1] = -1                                       # code -1 (missing) stays missing
    return Labels(rank[cat.codes], names[order])


class Lookup:
    """``col[i]`` as a string ("" when missing), read through the categorical codes."""

    def __init__(self, col) -> None:
        cat = categorical_of(col)
        if cat is not None:
            self._codes = cat.codes
            cats = cat.categories
            self._cats = cats if all(type(c) is str for c in cats.tolist()) else \
                objects([str(c) for c in cats.tolist()])
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
    the order is the same lexicographic one; np.unique's axis=0 path sorts a structured view instead, slow
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


def _codes(col) -> tuple[np.ndarray, list]:
    if isinstance(col, np.ndarray) and col.dtype.kind in "iub":      # no missing value: sorted codes will do
        uniq, inverse = np.unique(col, return_inverse=True)
        return inverse.reshape(-1).astype(np.int64), uniq.tolist()
    return factorize(objects(col))


def group_rows(*columns) -> list[tuple[tuple, np.ndarray]]:
    """Rows grouped by their values in ``columns`` (equally long; None and NaN are one missing value, read
    as None): ``(values, rows)`` per group, groups in order of first appearance, rows ascending.

    What ``DataFrame(columns).groupby(..., dropna=False, sort=False).indices`` gives, without the frame and
    the groupby, whose fixed cost outweighs a rank's few hundred collectives.
    """
    n = len(columns[0]) if columns else 0
    if n == 0:
        return []
    codes, uniques = zip(*(_codes(c) for c in columns))
    _, first, inverse = unique_rows(np.stack(codes, axis=1))
    rows = np.split(np.argsort(inverse, kind="stable"), np.cumsum(np.bincount(inverse))[:-1])
    out = []
    for g in np.argsort(first, kind="stable").tolist():
        at = first[g]
        out.append((tuple(None if c[at] < 0 else u[c[at]] for c, u in zip(codes, uniques)), rows[g]))
    return out


def percentile(values, q):
    """``np.percentile(values, q)`` (its default, linear method) of a 1-D array of numbers, computed as numpy
    computes it, step for step, so that every result is the same to the last bit; ``q`` a number or a list.

    numpy's own runs a plain np.unique over its indexes, which imports numpy.ma (see :func:`.table.distinct`).
    """
    x = np.sort(np.asarray(values).ravel())
    n = x.size
    if n == 0:
        raise ValueError("percentile of no values")
    scalar = np.ndim(q) == 0
    qs = np.true_divide(np.atleast_1d(np.asarray(q, dtype=np.float64)), 100)
    virtual = (n - 1) * qs           # numpy's virtual index for its linear method
    prev = np.floor(virtual)
    nxt = prev + 1
    above = virtual >= n - 1
    prev[above], nxt[above] = -1, -1
    below = virtual < 0
    prev[below], nxt[below] = 0, 0
    prev, nxt = prev.astype(np.intp), nxt.astype(np.intp)
    gamma = np.asarray(virtual - prev, dtype=virtual.dtype)
    a, b = x[prev], x[nxt]
    diff = b - a
    out = np.asarray(a + diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe")
    if x.dtype.kind in "fc" and np.isnan(x[-1]):
        out[...] = np.nan       # numpy: a NaN anywhere makes every percentile NaN
    return out[0] if scalar else out


def median(values):
    """``np.median(values)`` of a 1-D array of numbers, computed as numpy computes it: the mean of the middle
    value or two (NaN when there is a NaN). numpy's own checks a float array for a masked one, which imports
    numpy.ma (see :func:`.table.distinct`)."""
    x = np.sort(np.asarray(values).ravel())
    n = x.size
    if n == 0:
        raise ValueError("median of no values")
    middle = np.mean(x[(n - 1) // 2: n // 2 + 1])
    if x.dtype.kind in "fc" and np.isnan(x[-1]):
        return x.dtype.type(np.nan)
    return middle


# A profiler trace or an NCCL log records seconds to hours: a time farther than this from the median start of
# its rows is a corrupt timestamp or a clock jump (year 2116 at 2**62 ns), not an event, and would stretch its
# step, or every timeline of the run, over a century.
FAR_NS = 24 * 3600 * 10**9


def median_start(starts: np.ndarray) -> int:
    """The median of ``starts`` (not empty), the centre :func:`far_times` measures from."""
    return int(np.partition(starts, starts.size // 2)[starts.size // 2])


def far_times(starts: np.ndarray, ends: np.ndarray, center: int) -> np.ndarray:
    """Which rows start or end more than :data:`FAR_NS` from ``center`` (int64 ns; no bound wraps)."""
    lo, hi = max(center - FAR_NS, 0), min(center + FAR_NS, np.iinfo(np.int64).max)
    return (starts < lo) | (ends > hi)
