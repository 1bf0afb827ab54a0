"""What every fuzz case must satisfy, and the trace's time span it is checked against.

The span is computed here from the mutated input itself, with Python integers (no int64 to wrap), and
independently of tracelens: for Kineto every complete event's ``ts`` and ``ts + dur`` (numbers, or numbers
written as text, as tracelens reads them) plus ``baseTimeNanoseconds``; for nsys every start and end of the
activity, API and NVTX tables plus ``utcEpochNs``. A report whose numbers wrapped or came from nowhere
falls outside it.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import urllib.parse
import zlib
from decimal import Decimal, InvalidOperation
from pathlib import Path

CODES = {0, 2, 3}
# Absolute times in the report; every other integer field ending in _ns is a length.
ABSOLUTE = {"start_ns", "end_ns", "compute_start_ns", "compute_phase_end_ns", "first_comm_ns", "first_ns", "launch_ns",
            "drained_ns", "base_ns"}
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
_SLACK = 1000          # ns: float µs in Kineto may round by up to half a ns per value


def _ns(value) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return Decimal(value) * 1000
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        try:
            return Decimal(value.strip()) * 1000
        except InvalidOperation:
            return None
    return None


def _whole(value) -> int | None:
    """An integer as the report reads a document field: an int, a float or number text with no fraction."""
    if type(value) is int:
        return value
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        try:
            number = Decimal(value.strip())
        except InvalidOperation:
            return None
    elif type(value) is float and math.isfinite(value):
        number = Decimal(value)
    else:
        return None
    return int(number) if number == number.to_integral_value() else None


def kineto_span(data: bytes) -> tuple[int, int] | None:
    """(first start, last end) in epoch ns of the complete events, or None when the file is not readable
    JSON here (then the report must not have succeeded with numbers the span would check)."""
    import gzip
    try:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        doc = json.loads(data.decode("utf-8", "replace"))
    except (ValueError, OSError, EOFError, RecursionError, zlib.error):
        return None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    base = doc.get("baseTimeNanoseconds") if isinstance(doc, dict) else None
    # A whole number written as text or as a float is read (malformed-header says so); a base no int64 holds
    # is ignored by the report (its malformed-header warning), as here.
    base = _whole(base)
    base = base if base is not None and -2**63 <= base < 2**63 else 0
    times = []
    for e in events if isinstance(events, list) else []:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts, dur = _ns(e.get("ts")), _ns(e.get("dur"))
        if ts is None or dur is None:
            continue
        times.append((int(ts) + base, int(ts + max(dur, Decimal(0))) + base))
    span = _bulk(times)
    return None if span is None else (span[0] - _SLACK, span[1] + _SLACK)


# The report skips events more than a day from the median start of a rank's events (its far-times warning);
# the span leaves out those more than two days away, so that a time between the two (where the checker's
# median, over other events, may differ from the report's) is never counted against a report.
_FAR_NS = 2 * 24 * 3600 * 10**9


def _bulk(times: list[tuple[int, int]]) -> tuple[int, int] | None:
    """(first start, last end) of the (start, end) pairs within _FAR_NS of the median start."""
    if not times:
        return None
    starts = sorted(s for s, _ in times)
    center = starts[len(starts) // 2]
    kept = [(s, t) for s, t in times if s >= center - _FAR_NS and t <= center + _FAR_NS]
    return (min(s for s, _ in kept), max(t for _, t in kept)) if kept else None


def inspector_span(folder: Path) -> tuple[int, int] | None:
    """Over the NCCL Inspector logs under ``folder``: each record's kernel start (earliest channel) and end
    (latest), µs integers in ns within int64, those far from their log's median left out (as ``_bulk``). The
    cross-rank view aligns each host's clock to another's from the same times, so the span is widened by its
    own width on either side: a wrapped or made-up time still falls far outside it. None when a log cannot be
    read whole here (gzip damaged: the report reads what it can)."""
    import gzip

    spans = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error):
                return None
        times = []
        for line in data.split(b"\n"):
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue
            perf = rec.get("coll_perf") if isinstance(rec, dict) else None
            ts = perf.get("event_trace_ts") if isinstance(perf, dict) else None
            kernels = ts.get("kernel_events") if isinstance(ts, dict) else None
            if not isinstance(kernels, list) or not kernels or not all(isinstance(k, dict) for k in kernels):
                continue
            starts = [k.get("kernel_start_ts") for k in kernels]
            stops = [k.get("kernel_stop_ts") for k in kernels]
            if all(type(v) is int and 0 <= v * 1000 < 2**63 for v in starts + stops):
                times.append((min(starts) * 1000, max(stops) * 1000))
        span = _bulk(times)
        if span is not None:
            spans.append(span)
    if not spans:
        return None
    lo, hi = min(s for s, _ in spans), max(t for _, t in spans)
    return lo - (hi - lo) - _SLACK, hi + (hi - lo) + _SLACK


def nsys_span(path: Path) -> tuple[int, int] | None:
    """Over the rows whose times are integers and fall in [0, 2**63) once the epoch offset is added (the
    others are skipped by the report: NULL, text, wrapped)."""
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error:
        return None
    con.text_factory = bytes
    times = []
    try:
        base = 0
        try:
            row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
            base = row[0] if row and type(row[0]) is int and 0 <= row[0] < 2**63 else 0
        except Exception:
            pass
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
            try:
                rows = con.execute(f'SELECT start, "end" FROM {t}').fetchall()
            except Exception:       # no such table or column, a torn page: the report reads what it can
                continue
            for a, b in rows:
                a, b = _nsys_int(a), _nsys_int(b)
                if a is not None and b is not None:
                    b = max(a, b)                   # an end before the start: clamped, as the report does
                    if 0 <= a + base < 2**63 and 0 <= b + base < 2**63:
                        times.append((a + base, b + base))
    finally:
        con.close()
    return _bulk(times)


def _nsys_int(v) -> int | None:
    """A time as the report reads it: an integer, a REAL truncated (as numpy converts it), integer text."""
    if type(v) is int:
        return v
    if type(v) is float and math.isfinite(v):
        return int(v)
    if isinstance(v, bytes) and re.fullmatch(rb"-?\d+", v.strip()):
        return int(v)
    return None


# Where a length is bounded by the trace's span: per-step and per-rank metrics, the summary, collectives.
# Diagnosis evidence sums over many calls or kernels (blocked time, launch delays), so there only its sign.
_SPANNED = re.compile(r"^\$\.(ranks\[\d+\]\.(steps\[\d+\]|totals|pre_capture)|summary|collectives\[\d+\])\.[a-z_]+$")


def problems(code: int, out: str, err: str, span: tuple[int, int] | None) -> list[str]:
    """Why a case failed (empty: it passed)."""
    found = []
    if code not in CODES:
        found.append(f"exit code {code}")
    if "Traceback" in err:
        found.append("traceback on stderr")
    if code != 0:
        if code in (2, 3) and err.count("\n") != 1:
            found.append(f"error is not one line: {err!r}")
        return found
    try:
        report = json.loads(out, parse_constant=_no_constant)
    except ValueError as exc:
        return found + [f"output is not strict JSON ({exc})"]
    found += _step_invariants(report)
    if span is None:        # the checker could not read the input's times (a torn page): invariants only
        return found
    lo, hi = span
    n_ranks = max(1, len(report.get("ranks") or []))
    for path, key, value in _walk(report):
        if not key.endswith("_ns") or not isinstance(value, int):
            continue
        if key in ABSOLUTE:
            if not lo <= value <= hi:
                found.append(f"{path} = {value} outside the trace's span [{lo}, {hi}]")
        elif value < 0 or _SPANNED.match(path) and value > (hi - lo) * n_ranks:
            found.append(f"{path} = {value} not a length within the trace's span ({hi - lo} ns × {n_ranks} ranks)")
    return found


def command_problems(code: int, out: str, err: str, json_out: bool) -> list[str]:
    """Why a case of another command failed (history, gate, a report reading a config file): exit code 0, 1
    (a gate that failed), 2 or 3; an error is one line; no traceback; JSON output strict."""
    found = []
    if code not in CODES | {1}:
        found.append(f"exit code {code}")
    if "Traceback" in err:
        found.append("traceback on stderr")
    if code in (2, 3) and err.count("\n") != 1:
        found.append(f"error is not one line: {err!r}")
    if code in (0, 1) and json_out:
        try:
            json.loads(out, parse_constant=_no_constant)
        except ValueError as exc:
            found.append(f"output is not strict JSON ({exc})")
    return found


# How Python writes a float that is no number ("nan", "inf", "-inf"), standing alone: what a renderer prints
# when a NaN reached its format string. Never a word of the report's own text (a name holding "info" is not one).
_NOT_A_NUMBER = re.compile(r"(?<![A-Za-z0-9_])-?(nan|inf)(?![A-Za-z0-9_])")


def report_problems(code: int, out: str, err: str, fmt: str | None, name: str) -> list[str]:
    """Why a case reading a saved report failed: the exit codes of :func:`command_problems`; an input error
    names the file (``name``, the mutated report's file name); no ``OverflowError`` anywhere; JSON output
    strict, text and Markdown with no ``nan``/``inf`` printed for a number."""
    found = command_problems(code, out, err, fmt == "json")
    if "OverflowError" in err:
        found.append("OverflowError on stderr")
    if code == 3 and name not in err:
        found.append(f"the error does not name {name}: {err.strip()!r}")
    if code in (0, 1) and fmt in ("text", "markdown"):
        hit = _NOT_A_NUMBER.search(out)
        if hit:
            found.append(f"{hit.group(0)!r} printed for a number: ...{out[max(0, hit.start() - 80):hit.end() + 20]!r}")
    return found


def figure_problems(figures: list) -> list[str]:
    """A figure drawn from a saved report holding an infinite number, or "nan"/"inf" in its text. A NaN among
    a trace's numbers is plotly's gap (a heatmap cell without a step, a break between a strip's lines): kept."""
    found = []
    for i, fig in enumerate(figures):
        if not hasattr(fig, "to_plotly_json"):
            continue
        stack = [("$", fig.to_plotly_json())]
        while stack and len(found) < 4:
            path, value = stack.pop()
            if isinstance(value, dict) and set(value) >= {"dtype", "bdata"}:
                # plotly's typed array, base64 of the numbers
                import base64

                import numpy as np
                stack.append((path, np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()))
            elif isinstance(value, dict):
                stack += [(f"{path}.{k}", v) for k, v in value.items()]
            elif isinstance(value, (list, tuple)):
                stack += [(f"{path}[{j}]", v) for j, v in enumerate(value)]
            elif hasattr(value, "tolist"):          # numpy arrays and scalars, as plotly keeps them
                stack.append((path, value.tolist()))
            elif isinstance(value, float) and math.isinf(value):
                found.append(f"figure {i}: {path} = {value}")
            elif isinstance(value, str) and _NOT_A_NUMBER.search(value):
                found.append(f"figure {i}: {path} = {value[:200]!r}")
    return found


def expected(expect: dict | None, code: int, out: str) -> list[str]:
    """What a regression case says its answer must be besides (``expect``: ``code`` the exit code, 0 when not
    given; of a report, ``warnings`` codes present, ``not_warnings`` codes absent, ``messages``: a code's
    message holding a text); nothing without it."""
    if not expect:
        return []
    if code != expect.get("code", 0):
        return [f"exit code {code}, where " + (f"exit code {expect['code']}" if expect.get("code") else
                                               "a report") + " was expected"]
    if code != 0:
        return []
    try:
        said = {w["code"]: w["message"] for w in json.loads(out).get("warnings", [])}
    except (ValueError, AttributeError):
        return ["no JSON report"]
    return ([f"no {c} warning" for c in expect.get("warnings", []) if c not in said]
            + [f"a {c} warning" for c in expect.get("not_warnings", []) if c in said]
            + [f"{c} does not say {text!r}" for c, text in expect.get("messages", {}).items()
               if text not in said.get(c, "")])


def _no_constant(name):
    raise ValueError(f"{name} in the JSON")


def _walk(obj, path="$"):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)):
                yield from _walk(v, f"{path}.{k}")
            else:
                yield f"{path}.{k}", k, v
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}[{i}]")


def _step_invariants(report: dict) -> list[str]:
    """overlap ≤ comm ≤ duration, exposed = comm − overlap, 0 ≤ idle, compute ≤ duration, shares in range."""
    found = []
    for r in report.get("ranks") or []:
        for s in r.get("steps") or []:
            d, c, o, x = s["duration_ns"], s["comm_ns"], s["overlap_ns"], s["exposed_comm_ns"]
            where = f"rank {r.get('rank')} step {s.get('step')}"
            if not (0 <= o <= c <= d and x == c - o and 0 <= s["idle_ns"] <= d and 0 <= s["compute_ns"] <= d
                    and s["end_ns"] - s["start_ns"] == d):
                found.append(f"{where}: step invariants broken {s}")
            pct, frac = s.get("overlap_pct"), s.get("exposed_comm_fraction")
            if pct is not None and not 0 <= pct <= 100 or frac is not None and not 0 <= frac <= 1:
                found.append(f"{where}: share out of range (overlap_pct {pct}, exposed_comm_fraction {frac})")
    return found
