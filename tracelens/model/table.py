"""The model's tables: named numpy columns, and categorical columns as codes into their names.

A rank's tables are read column by column (``table["start_ns"]`` is an int64 array), masked and indexed
with numpy; the analyzers never need a row object, a join or an index. pandas would give all that and
more, but its import alone would outweigh everything else a first report of a small trace does
(bench/RESULTS.md, "A first report without pandas"). So the model is plain numpy, and
:meth:`Table.to_pandas` gives a DataFrame to whoever wants one (the dashboard's timeline, notebooks).

This module imports numpy only.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np


def distinct(values) -> np.ndarray:
    """``np.unique(values)``: the distinct values, sorted.

    Asked with its counts, np.unique gives the same values without the check a plain call makes in numpy 2
    (``np.ma.is_masked``), which imports numpy.ma into every report's start for nothing. Every
    plain np.unique and np.percentile of a report goes through here or :func:`.columns.percentile`
    (tests/unit/test_columns.py runs a report and checks that numpy.ma stays unloaded).
    """
    return np.unique(values, return_counts=True)[0]


_NONE = np.array([None], dtype=object)


def objects(values) -> np.ndarray:
    """``values`` as a 1-d object array, element by element (a tuple or list value stays one element)."""
    if isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1:
        return values
    values = values.tolist() if isinstance(values, np.ndarray) else list(values)   # str, not np.str_
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


class Labels:
    """A categorical column: ``codes`` (an integer array) index ``categories`` (an object array of str);
    code -1 is a missing value. A trace repeats a few thousand names over 10^5 rows, so a test of the names
    runs once per category (see :mod:`tracelens.model.columns`) and rows carry only their code."""

    __slots__ = ("codes", "categories")
    dtype = "category"

    def __init__(self, codes, categories) -> None:
        self.codes = np.asarray(codes)
        if self.codes.dtype.kind not in "iu":
            self.codes = self.codes.astype(np.int64)
        self.categories = objects(categories)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, key):
        """A row's value (None when missing) for an integer, else the rows picked, as Labels."""
        if isinstance(key, (int, np.integer)):
            c = int(self.codes[key])
            return self.categories[c] if c >= 0 else None
        return Labels(self.codes[key], self.categories)

    def to_numpy(self) -> np.ndarray:
        """Every row's value as an object array (None where missing)."""
        return np.concatenate([self.categories, _NONE])[self.codes]

    def tolist(self) -> list:
        return self.to_numpy().tolist()

    def __iter__(self) -> Iterator:
        return iter(self.tolist())

    def code(self, value: str) -> int:
        """The code of ``value``; -2 (no row's code) when it is not a category."""
        hit = np.flatnonzero(self.categories == value) if len(self.categories) else ()
        return int(hit[0]) if len(hit) else -2

    def __eq__(self, value):                # element-wise, as numpy and pandas compare
        if isinstance(value, str):
            return self.codes == self.code(value)
        return self.to_numpy() == value

    def __ne__(self, value):
        return ~self.__eq__(value)

    __hash__ = None  # type: ignore[assignment]

    def isin(self, values: Iterable) -> np.ndarray:
        wanted = frozenset(values)
        hit = np.fromiter((c in wanted for c in self.categories.tolist()), bool, len(self.categories))
        return np.append(hit, False)[self.codes]

    def unique(self) -> list:
        """The values in use (not missing), in category order."""
        used = distinct(self.codes)
        return self.categories[used[used >= 0]].tolist()

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes) + sum(len(c) + 49 for c in self.categories.tolist())

    def __repr__(self) -> str:
        head = ", ".join(repr(v) for v in self[:5].tolist()) if len(self) else ""
        return f"Labels([{head}{', …' if len(self) > 5 else ''}], {len(self)} rows, {len(self.categories)} names)"


class Table:
    """Equally long named columns: numpy arrays (int64, bool, object) or :class:`Labels`. Read-only by
    convention: a parser builds it, the analyzers only read it."""

    __slots__ = ("_cols", "_n")

    def __init__(self, columns: dict) -> None:
        cols = {}
        n = None
        for name, v in columns.items():
            if not isinstance(v, (np.ndarray, Labels)):
                v = np.asarray(v)
            if isinstance(v, np.ndarray) and v.dtype.kind in "US":      # str, not np.str_, as the cache keeps
                v = objects(v)
            if n is None:
                n = len(v)
            elif len(v) != n:
                raise ValueError(f"column {name!r} has {len(v)} rows, the table {n}")
            cols[name] = v
        self._cols, self._n = cols, n or 0

    def __getitem__(self, key):
        """A column by name; for an index array or a bool mask, those rows (:meth:`take`)."""
        if isinstance(key, str):
            return self._cols[key]
        return self.take(key)

    def __contains__(self, name: str) -> bool:
        return name in self._cols

    def __len__(self) -> int:
        return self._n

    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    @property
    def empty(self) -> bool:
        return self._n == 0

    def items(self):
        return self._cols.items()

    def take(self, rows) -> "Table":
        """The rows picked by an index array or a bool mask, in that order."""
        return Table({c: v[rows] for c, v in self._cols.items()})

    def sort_by(self, name: str) -> "Table":
        """The rows in ascending order of one column, ties in their order (a stable sort)."""
        order = np.argsort(self._cols[name], kind="stable")
        if (order[1:] > order[:-1]).all():
            return self
        return self.take(order)

    @property
    def nbytes(self) -> int:
        """Memory held, strings counted (about), as ``DataFrame.memory_usage(deep=True)`` would."""
        total = 0
        for v in self._cols.values():
            if isinstance(v, Labels):
                total += v.nbytes
            elif v.dtype == object:
                total += v.nbytes + sum(len(x) + 49 if isinstance(x, str) else 16 for x in v.tolist())
            else:
                total += v.nbytes
        return total

    def to_pandas(self):
        """A pandas DataFrame of the same columns (categoricals as pandas categoricals)."""
        import pandas as pd     # lazy: pandas, only for who asks for a DataFrame; no report imports it

        data = {}
        for c, v in self._cols.items():
            if isinstance(v, Labels):
                data[c] = pd.Categorical.from_codes(v.codes, categories=pd.Index(v.categories, dtype=object))
            elif v.dtype == object:
                data[c] = pd.Series(v, dtype=object)
            else:
                data[c] = v
        return pd.DataFrame(data, columns=list(self._cols))

    def __repr__(self) -> str:
        return f"Table({self._n} rows: {', '.join(self._cols)})"
