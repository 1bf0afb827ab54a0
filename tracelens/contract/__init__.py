"""The Report: the versioned JSON contract (schema ``tracelens.report/1``) every renderer, the gate and the
dashboard read. Keys may be added in later versions; existing keys never change meaning.

Ratios are ``None`` (JSON null) when undefined (no communication, zero-length window) — never NaN.

The Report and how it is written and read are here; its parts in ``per_rank`` (``ranks[]``) and ``per_run``
(the rest), whose every name this module gives too: callers import from ``tracelens.contract``.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Optional

import msgspec

from .._version import __version__
from ..arguments import ANYTHING, TEXT, takes
from ..errors import EMPTY_FILE, InputError, printable
from ..json_text import UNREADABLE, blank, why
from .per_rank import (PatternEvidence, DimensionStep, GroupRule, DimensionTotals, StepMetrics, Totals, PreCapture,
                       BucketPrediction, BucketModel, SettingCheck, RankResult)
from .per_run import (DimensionRun, Summary, Collective, RankAcross, MatchedCollective, BandwidthRow, Matching,
                      CrossRank, Diagnosis, SEVERITIES, MIXED, InputFile, WarningEntry, EvidenceLine, Communicator,
                      BandwidthCheck, Transport, Culprit, Cause, Verdict, OutlierKind, WorkTime, InspectorRanks,
                      InspectorPair)

__all__ = ["SCHEMA", "Report", "Tool", "ratio", "is_report_file", "read_report", "PatternEvidence", "DimensionStep",
           "GroupRule", "DimensionTotals", "StepMetrics", "Totals", "PreCapture", "BucketPrediction", "BucketModel",
           "SettingCheck", "RankResult", "DimensionRun", "Summary", "Collective", "RankAcross", "MatchedCollective",
           "BandwidthRow", "Matching", "CrossRank", "Diagnosis", "SEVERITIES", "MIXED", "InputFile", "WarningEntry",
           "EvidenceLine", "Communicator", "BandwidthCheck", "Transport", "Culprit", "Cause", "Verdict",
           "OutlierKind", "WorkTime", "InspectorRanks",
           "InspectorPair"]

SCHEMA = "tracelens.report/1"
NOTEBOOK = "tracelens.notebook"      # what draws a Report in a notebook (Report._repr_html_, figure, to_pandas)
_FAMILY = SCHEMA.split("/")[0]


class Tool(msgspec.Struct, kw_only=True):
    name: str = "tracelens"
    version: str = __version__


class Report(msgspec.Struct, kw_only=True):
    # The fields in the order the JSON writes its keys: the schema first, as every reader (this release's and
    # older ones: is_report_file, parsers.sniff_json) recognises a saved report by its first bytes; then the
    # answer, as every output opens with it (README, "The run verdict"); then what it was made of.
    schema: str = SCHEMA
    verdict: Optional[Verdict] = None      # null only in reports written before it existed
    tool: Tool = msgspec.field(default_factory=Tool)
    inputs: list[InputFile]
    ranks: list[RankResult]
    summary: Summary
    collectives: list[Collective]
    diagnoses: list[Diagnosis] = msgspec.field(default_factory=list)
    warnings: list[WarningEntry] = msgspec.field(default_factory=list)
    transport: Optional[Transport] = None  # null without NCCL logs and without inter-node bandwidth
    cross_rank: Optional[CrossRank] = None  # null for a single rank
    outliers: list[OutlierKind] = msgspec.field(default_factory=list)   # kinds of collective with outliers
    inspector: Optional[InspectorRanks] = None   # null unless ranks came from NCCL Inspector logs

    def to_json(self, indent: int = 2) -> bytes:
        try:
            raw = msgspec.json.encode(self)
        except UnicodeEncodeError:
            # A file name that is not UTF-8 (lone surrogates in Python): written escaped, as printed everywhere.
            raw = msgspec.json.encode(_printable(msgspec.to_builtins(self)))
        return msgspec.json.format(raw, indent=indent) if indent else raw

    @classmethod
    def from_json(cls, data: bytes | str) -> "Report":
        """Read a saved report back (unknown keys from newer versions are ignored)."""
        return msgspec.json.decode(data, type=cls)

    # In a notebook (tracelens/notebook.py does it; the Report stays a data definition):

    def _repr_html_(self) -> str:
        """The verdict, the headline numbers, the rank budget and the heatmap, as a notebook shows a Report
        (plotly.js inlined once per notebook, no CDN)."""
        return _notebook().report_html(self)

    def _repr_pretty_(self, printer, cycle) -> None:
        """IPython's plain text of a Report: one line with its verdict (its repr holds every number)."""
        printer.text(_notebook().report_text(self))

    @takes("Report.figure()", self=ANYTHING, name=TEXT)
    def figure(self, name: str, **options):
        """The plotly figure of a dashboard view: ``budget`` (``step=``, ``sort=``), ``heatmap``
        (``metric=``), ``timeline`` (``rank=``, ``step=``: read from that rank's trace), ``wait_transfer``,
        ``strip`` (``step=``), ``busbw``, ``dimensions``, ``outliers``, ``verdict``. Needs plotly (the
        ``dashboard`` extra)."""
        return _notebook().figure(self, name, **options)

    @takes("Report.to_pandas()", self=ANYTHING, table=TEXT)
    def to_pandas(self, table: str):
        """``steps``, ``collectives``, ``findings`` or ``ranks`` as a pandas DataFrame: one row per entry of
        the JSON report (``ranks[].steps[]`` with ``rank``, ``collectives[]``, ``diagnoses[]``, ``ranks[]``),
        columns named as its fields (a nested struct's as ``parent.field``)."""
        return _notebook().table(self, table)


def _notebook():
    """The module that draws a Report in a notebook. It imports the contract and the renderers, so the
    contract names it rather than importing it: an import would tie the data definition to the layers above
    it in a circle (docs/architecture.md, "A Report in a notebook")."""
    return importlib.import_module(NOTEBOOK)


def _printable(obj):
    """Every string of a JSON-ready value through :func:`.errors.printable`."""
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, dict):
        return {printable(k) if isinstance(k, str) else k: _printable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_printable(v) for v in obj]
    return obj


def ratio(num: int, den: int, scale: float = 1.0) -> Optional[float]:
    """num/den (times scale), or None when den is 0 — the report never holds NaN."""
    return None if den <= 0 else scale * num / den


def is_report_file(path) -> bool:
    """Whether ``path`` is a saved report (``tracelens report --format json``) rather than a trace."""
    p = Path(path)
    if not p.is_file() or not p.name.lower().endswith(".json"):
        return False
    with open(p, "rb") as fh:
        head = fh.read(256)
    return b'"schema"' in head and _FAMILY.encode() in head


def read_report(path) -> Report:
    """A saved report, or InputError (exit 3) naming the file and what is wrong with it."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read report: {exc.strerror or exc}", path=str(path)) from None
    try:
        doc = msgspec.json.decode(data)
    except UNREADABLE as exc:
        raise InputError(EMPTY_FILE if blank(data) else f"not a JSON report: {why(exc)}", path=str(path)) from None
    except RecursionError:
        raise InputError("not a JSON report: nested deeper than the decoder's limit", path=str(path)) from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema, str) or not schema.startswith(_FAMILY + "/"):
        raise InputError(f"not a tracelens report (schema {schema!r})", path=str(path))
    if schema != SCHEMA:
        raise InputError(f"report schema {schema} is not the {SCHEMA} this version reads", path=str(path))
    if _LONG_NUMBER.search(data):
        where = _outside_int64(doc)
        if where is not None:
            raise InputError(f"malformed report: {where} is outside the int64 range a report's numbers have",
                             path=str(path))
    try:
        return msgspec.convert(doc, Report)
    except msgspec.ValidationError as exc:
        raise InputError(f"malformed report: {exc}", path=str(path)) from None


# A number of 19 digits or more: the only way a JSON integer can leave int64 (|x| < 2^63 has at most 19
# digits). Searched in the bytes first, so that a report without one is never walked value by value.
_LONG_NUMBER = re.compile(rb"\d{19,}")
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _outside_int64(doc) -> str | None:
    """The path (``$.ranks[0].steps[0].duration_ns``) of the first integer outside int64, else None: every
    time, count and size a Report holds is int64 inside, and a larger one breaks its columns later."""
    stack = [("$", doc)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            if not _INT64[0] <= value <= _INT64[1]:
                return where
        elif isinstance(value, dict):
            stack.extend((f"{where}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
    return None
