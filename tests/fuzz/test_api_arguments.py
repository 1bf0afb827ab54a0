"""The Python API's arguments under generated values (issue 49): hypothesis draws, for each parameter of each
public function of ``tracelens.api`` and of a Report's notebook methods, values of every kind (None, bools,
ints up to 2^70, floats with NaN, text, bytes, paths, lists, tuples, sets, dicts, iterators, functions and the
tracelens objects the API hands out), and each must be either admitted or refused with a one-line UsageError
naming the call and the parameter, never let through to a traceback.

What is valid is written here again, independently of ``tracelens/arguments.py``: ``VALID`` says, for every
description a parameter's kind gives, which values fit it. A value it admits is given to a stand-in of the
function (the same signature and kinds, a body that only records the call), so that no report runs; a value it
refuses is given to the real function too, which must refuse it before doing anything.

Budget: a fixed, derandomized set of 660 cases (like ``test_fuzz.py``'s seeded ones), about 4 s here.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tracelens
from tracelens import api, notebook
from tracelens.analyzers import Context, RankAnalysis, Thresholds
from tracelens.arguments import takes
from tracelens.contract import Report
from tracelens.errors import UsageError
from tracelens.gating import GateConfig
from tracelens.model import RankTrace
from tracelens.model.nccl_records import NcclInputs
from tracelens.options import ReportOptions
from tracelens.parsers import Inputs, discover

from conftest import SAMPLES

CASES = 660             # 5 a parameter: 132 parameters (test_every_description_is_known_here)
SAMPLE = str(SAMPLES / "wfbp_100")


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _path(v) -> bool:
    return isinstance(v, (str, os.PathLike))


def _items(v, fits) -> bool:
    """A list, tuple, set or iterator whose every item fits (a str, bytes or a dict is no list of items)."""
    return isinstance(v, (list, tuple, set, frozenset, Iterator)) and all(fits(x) for x in v)


def _or_none(fits):
    return lambda v: v is None or fits(v)


# Every description a kind gives (what a message says a parameter wants) -> which values fit it.
VALID = {
    "a str": lambda v: isinstance(v, str),
    "a str or None": lambda v: v is None or isinstance(v, str),
    "a list of str (regular expressions)": lambda v: _items(v, lambda x: isinstance(x, str)),
    "a list of NAME=VALUE str": lambda v: _items(v, lambda x: isinstance(x, str)),
    "a path (str or os.PathLike)": _path,
    "a path (str or os.PathLike) or None": _or_none(_path),
    "a path (str or os.PathLike) or a list of paths": lambda v: _path(v) or _items(v, _path),
    "an int": _int,
    "an int or None": _or_none(_int),
    "an int of at least 0": lambda v: _int(v) and v >= 0,
    "an int of at least 0 or None": _or_none(lambda v: _int(v) and v >= 0),
    "an int of at least 1 or None": _or_none(lambda v: _int(v) and v >= 1),
    "an int, None or 'all'": lambda v: v is None or _int(v) or v == "all" and isinstance(v, str),
    "a bool (True or False)": lambda v: isinstance(v, bool),
    "a bool (True or False) or None": _or_none(lambda v: isinstance(v, bool)),
    "a function or None": _or_none(callable),
    "a mapping of str to str (an environment) or None": _or_none(lambda v: isinstance(v, Mapping) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items())),
    "a mapping of str keys or None": _or_none(lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v)),
    "a Thresholds or None": _or_none(lambda v: isinstance(v, Thresholds)),
    "a Thresholds, a list of NAME=VALUE str or None": _or_none(
        lambda v: isinstance(v, Thresholds) or _items(v, lambda x: isinstance(x, str))),
    "a Context (api.context()) or None": _or_none(lambda v: isinstance(v, Context)),
    "NcclInputs (api.nccl_inputs()) or None": _or_none(lambda v: isinstance(v, NcclInputs)),
    "a ReportOptions": lambda v: isinstance(v, ReportOptions),
    "a ReportOptions or None": _or_none(lambda v: isinstance(v, ReportOptions)),
    "a GateConfig (api.gate_config())": lambda v: isinstance(v, GateConfig),
    "a Report": lambda v: isinstance(v, Report),
    "a RankTrace (api.load())": lambda v: isinstance(v, RankTrace),
    "a list of RankTrace (api.load())": lambda v: _items(v, lambda x: isinstance(x, RankTrace)),
    "a list of RankAnalysis (api.analyze_rank())": lambda v: _items(v, lambda x: isinstance(x, RankAnalysis)),
    "Inputs (parsers.discover())": lambda v: isinstance(v, Inputs),
    "anything": lambda v: True,
}


class Objects:
    """The tracelens objects the API hands out, made once: values for the parameters that take them."""

    def __init__(self) -> None:
        self.traces = tracelens.load(SAMPLE, jobs=0)
        self.report = tracelens.report(SAMPLE)
        self.all = [self.traces[0], self.report, Thresholds(), api.context(), ReportOptions(), GateConfig(),
                    discover([SAMPLE]), api.analyze_rank(self.traces[0]), api.nccl_inputs(SAMPLE)]
        # What a call needs besides the parameter under test (the required ones), each of the right kind.
        self.required = {"paths": SAMPLE, "files": self.all[6], "options": ReportOptions(), "trace": self.traces[0],
                         "analyses": [], "traces": [], "fmt": "json", "out_dir": "out", "before": SAMPLE, "after": SAMPLE,
                         "config": GateConfig(), "rep": self.report, "rank": 0, "step": None, "db": "h.db",
                         "report": self.report, "self": self.report, "name": "budget", "table": "steps"}
        # Where one name takes another kind in another function: compare_reports compares Reports made.
        self.required_in = {"compare_reports": {"before": self.report, "after": self.report}}


@pytest.fixture(scope="module")
def objects() -> Objects:
    return Objects()


# (where, the checked function, what it is called as) for each public function and Report method, and each
# figure's options (the view functions Report.figure hands them to).
CALLS = ([(name, getattr(api, name), getattr(api, name)) for name in sorted(
    n for n, f in vars(api).items() if inspect.isfunction(f) and f.__module__ == "tracelens.api"
    and not n.startswith("_"))]
    + [("Report.figure", Report.figure, Report.figure), ("Report.to_pandas", Report.to_pandas, Report.to_pandas)]
    + [(f"figure {view}", draw, None) for view, (draw, _) in notebook.VIEWS.items() if hasattr(draw, "kinds")])
PARAMETERS = [(where, name) for where, fn, _ in CALLS for name in fn.kinds]


def test_every_description_is_known_here():
    wants = {fn.kinds[name].wants for where, fn, _ in CALLS for name in fn.kinds}
    assert wants <= set(VALID), wants - set(VALID)
    # 116 of the api's 21 functions, 4 of the two methods (self and the name), 12 of the 4 figures with options
    # (budget 3, heatmap 2, timeline 5, strip 2, each with its report): every one drawn about 5 times.
    assert len(PARAMETERS) == 116 + 4 + 12


SCALARS = (st.none() | st.booleans() | st.integers(-3, 2**70) | st.floats() | st.text(max_size=6)
           | st.binary(max_size=3) | st.sampled_from(["all", "a=1", SAMPLE, Path(SAMPLE), "steps", "heatmap", print,
                                                     object(), b"/tmp", os.environ]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.tuples(inner) | st.sets(
    st.text(max_size=3), max_size=2) | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=2)
    | st.builds(iter, st.lists(inner, max_size=2)), max_leaves=6)


@settings(derandomize=True, deadline=None, database=None, max_examples=CASES,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.sampled_from(PARAMETERS), VALUES, st.integers(0, 20))
def test_each_value_is_admitted_or_refused_in_one_line(objects, parameter, value, which):
    where, name = parameter
    _, fn, real = next(c for c in CALLS if c[0] == where)
    if which < len(objects.all) and which % 3 == 0:       # a third of the cases: one of tracelens' own objects
        value = objects.all[which]
    items = list(value) if isinstance(value, Iterator) else None
    fresh = (lambda: iter(items)) if items is not None else (lambda: value)
    valid = VALID[fn.kinds[name].wants](fresh())
    ran = []

    def stand_in(*args, **kwargs):
        ran.append(kwargs.get(name, args))
    stand_in.__signature__ = inspect.signature(fn)
    probe = takes(where, **fn.kinds)(stand_in)
    need = {**objects.required, **objects.required_in.get(where, {})}
    required = {p.name: need[p.name] for p in inspect.signature(fn).parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != name}
    try:
        probe(**required, **{name: fresh()})
    except UsageError as exc:
        assert not valid, (where, name, value, str(exc))
        assert str(exc).startswith(f"{where}: {name} must be ") and "\n" not in str(exc), str(exc)
    else:
        assert valid and ran, (where, name, value)
    if not valid and real is not None:
        # The real function refuses it too, before anything is read or written.
        with pytest.raises(UsageError, match=f"^{where}(\\(\\))?: {name} must be "):
            real(**required, **{name: fresh()})
