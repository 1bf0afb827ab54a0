"""Saved-report mutations: a ``report.json`` that ``tracelens report --format json -o`` wrote for a bundled
sample or a corpus trace, changed by a plan (as traces are, :mod:`.kineto_mut`), then given to one of the
readers of a saved report: ``tracelens report`` in each format, ``gate`` (as the run and as its
``--baseline``), ``diff`` (before and after), the notebook API (``api.report``, every ``to_pandas`` table and
every ``figure``) and the dashboard's app over it.

A saved report is untrusted input (docs/errors.md): it comes from a CI artifact or a colleague, so every
value in it may be of the wrong type, out of any range, or name trace files that are not its own. Operations
act on the decoded document (keys dropped or written twice, values of every JSON type, numbers past int64,
negative lengths, NaN and Infinity literals, lists nested thousands deep, a string where a list goes, rank
numbers and input files that disagree, another schema) or on the bytes (truncated, invalid UTF-8, a
byte-order mark, gzip under a ``.json`` or a ``.json.gz`` name).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import random
from pathlib import Path

# Values of every JSON type. ["raw", text] is spliced into the encoded text as it is (NaN, Infinity, 1e400:
# literals no strict encoder writes); ["deep", n] a list nested n deep (spliced: json.dumps itself recurses).
VALUES = [None, True, False, 0, -1, 1, 1.5, -0.5, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 2**70, -(2**63),
          -(2**63) - 1, 10**30, 1e300, -1e300, 1e-300, "", "abc", "12", "-5", "0x10", [], [1, 2], ["a"], {}, {"a": 1},
          ["raw", "NaN"], ["raw", "Infinity"], ["raw", "-Infinity"], ["raw", "1e400"], ["raw", "-1e400"],
          ["raw", "123456789012345678901234567890"], ["deep", 50], ["deep", 3000], "sawtooth", "critical",
          "\u00e9\u4e2d", "x" * 300]
# Values of the type already there: what the reader's types admit, so that the renderers, the gate and the
# figures meet them (a schema check alone would refuse the rest before they run).
SAME_TYPE = {int: [0, -1, 1, 2**31, 2**53 + 1, 2**62, 2**63 - 1, -(2**63), -(2**62)],
             float: [0.0, -0.0, -1.0, 1e300, -1e300, 1e-300, 5e-324, 1e308, 100.0, 101.5, -50.0, 2.0**63],
             str: ["", "x" * 300, "\u00e9\u4e2d", "\u202e", "[bold]x[/bold]", "<b>x</b>", "a|b", "sawtooth", "critical",
                   "mixed", "kineto", "nsys", "0"],
             type(None): [0, -1, 2**62, 1.5, "", []]}
HUGE = [2**63, 2**64, -(2**63) - 1, 10**30, 1e308, ["raw", "1e400"], ["raw", "NaN"], 2**62, 2**53 + 1]
SCHEMAS = ["tracelens.report/2", "tracelens.report/0", "tracelens.report", "tracelens.diff/1", "other/1", "", None,
           1, ["tracelens.report/1"]]
# Where an input's trace path may lead: another sample's trace (another rank's), a file that is no trace, a
# folder, nothing at all, a relative name; @SAMPLES@ is the bundled samples' folder.
INPUT_PATHS = ["@SAMPLES@/one_bucket/rank1.json.gz", "@SAMPLES@/straggler/rank0.json.gz", "@SAMPLES@/one_bucket",
               "@SAMPLES@/nsys_wfbp_100/all_ranks.sqlite", "/etc/passwd", "/nonexistent/rank0.json", "rank0.json.gz",
               "", "\x00", "report.json"]
RANK_NUMBERS = [0, 1, 2, 3, 7, -1, 2**31, 10**6, 2**63 - 1]
COMMANDS = ["report-text", "report-markdown", "report-json", "report-html", "gate-run", "gate-baseline",
            "diff-before", "diff-after", "api", "dashboard"]
COMMAND_WEIGHTS = [3, 3, 4, 1, 3, 4, 2, 3, 4, 1]


def bases_of(samples: Path, corpus: Path) -> dict[str, Path]:
    """The runs whose saved reports are mutated (base name -> the run's folder or file)."""
    return {f"samples/{s}": samples / s for s in ("one_bucket", "gloo_one_bucket", "cuda_nccl_ddp", "straggler",
                                                   "compute_bound_8", "serialized", "legacy_wfbp", "cuda_nccl_avg")} | {
        "corpus/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz":
            corpus / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
        "corpus/nsys/nsys-ai/healthy_1pct_minimal.sqlite": corpus / "nsys/nsys-ai/healthy_1pct_minimal.sqlite",
    }


def template(base: str, source: Path, workdir: Path) -> Path:
    """The unchanged saved report of ``source`` (made once per process), written as a user writes one:
    ``tracelens report SOURCE --format json -o FILE``."""
    from tracelens.cli import main

    path = workdir / "templates" / (base.replace("/", "_") + ".json")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            code = main(["report", str(source), "--format", "json", "-o", str(path)])
        if code != 0:
            raise RuntimeError(f"cannot make the saved report of {source}: {err.getvalue()}")
    return path


def _paths(doc, where=()) -> list[tuple]:
    """Every value's path in ``doc`` (keys and indices), the document itself first."""
    out = [where]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, where + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, where + (i,))
    return out


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def plan(rng: random.Random, doc: dict) -> list:
    """1 to 4 operations on the saved report ``doc``, then the reader that gets it."""
    every = _paths(doc)[1:]
    numbers = [p for p in every if type(_get(doc, p)) in (int, float)]
    typed = [p for p in every if type(_get(doc, p)) in SAME_TYPE or type(_get(doc, p)) is bool]
    lengths = [p for p in numbers if isinstance(p[-1], str) and p[-1].endswith("_ns")]
    lists = [p for p in every if isinstance(_get(doc, p), list)]
    keyed = [p for p in every if isinstance(p[-1], str)]
    n_ranks, n_inputs = len(doc.get("ranks") or []), len(doc.get("inputs") or [])
    ops = []
    for _ in range(rng.choice([1, 1, 2, 2, 3, 4])):
        kind = rng.choices(["drop", "dup", "set", "same_type", "negative", "huge", "string_list", "deep", "rank",
                            "input", "schema", "bytes"], weights=[4, 5, 6, 18, 8, 4, 2, 2, 6, 6, 2, 4])[0]
        if kind == "drop":
            ops.append([kind, list(rng.choice(keyed))])
        elif kind == "dup":
            # Mostly a value the type admits: the second of two keys must be the one read, not refused.
            path = rng.choice(keyed)
            old = _get(doc, path)
            pool = SAME_TYPE.get(type(old)) if rng.random() < 0.7 else None
            ops.append([kind, list(path), _plain(rng.choice(pool or VALUES))])
        elif kind == "set":
            ops.append([kind, list(rng.choice(every)), _plain(rng.choice(VALUES))])
        elif kind == "same_type" and typed:
            path = rng.choice(typed)
            old = _get(doc, path)
            ops.append(["set", list(path), (not old) if type(old) is bool else rng.choice(SAME_TYPE[type(old)])])
        elif kind == "negative" and lengths:
            ops.append(["set", list(rng.choice(lengths)), -rng.choice([1, 1000, 10**9, 2**62])])
        elif kind == "huge" and numbers:
            ops.append(["set", list(rng.choice(numbers)), _plain(rng.choice(HUGE))])
        elif kind == "string_list" and lists:
            ops.append(["set", list(rng.choice(lists)), rng.choice(["abc", "", "[1, 2]", "0"])])
        elif kind == "deep":
            ops.append(["set", list(rng.choice(every)), ["deep", rng.choice([100, 900, 1100, 5000])]])
        elif kind == "rank" and n_ranks:
            ops.append(["set", ["ranks", rng.randrange(n_ranks), "rank"], rng.choice(RANK_NUMBERS)])
        elif kind == "input" and n_inputs:
            field = rng.choice(["rank", "rank", "path", "path", "format", "bytes"])
            value = {"rank": lambda: rng.choice(RANK_NUMBERS), "path": lambda: rng.choice(INPUT_PATHS),
                     "format": lambda: rng.choice(["nsys", "kineto", "nccl", "", "pdf"]),
                     "bytes": lambda: rng.choice([-1, 0, 2**63 - 1])}[field]()
            ops.append(["set", ["inputs", rng.randrange(n_inputs), field], value])
        elif kind == "schema":
            ops.append(["set", ["schema"], rng.choice(SCHEMAS)])
        elif kind == "bytes":
            ops.append([kind, rng.choice(["truncate", "bad_utf8", "bom", "empty", "gzip", "gzip_named", "trailing"]),
                        round(rng.random(), 4)])
    ops.append(["command", rng.choices(COMMANDS, weights=COMMAND_WEIGHTS)[0]])
    return ops


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


class _Raw:
    """Text spliced into the encoded document where the marker stands."""


def apply(ops: list, doc: dict, samples: Path) -> tuple[bytes, str]:
    """The mutated report's bytes, and the name to write them under."""
    doc = json.loads(json.dumps(doc))
    raws: list[str] = []

    def value(v):
        if isinstance(v, list) and len(v) == 2 and v[0] in ("raw", "deep") and isinstance(v[1], (str, int)):
            raws.append(v[1] if v[0] == "raw" else "[" * v[1] + "]" * v[1])
            return f"\x00RAW{len(raws) - 1}\x00"
        if isinstance(v, str):
            return v.replace("@SAMPLES@", str(samples))
        return v

    data_ops = []
    for op in ops:
        kind = op[0]
        if kind in ("bytes", "command"):
            data_ops.append(op)
            continue
        path = op[1]
        try:
            parent = _get(doc, path[:-1]) if path else None
        except (KeyError, IndexError, TypeError):       # an earlier op changed what was there
            continue
        if parent is None or not isinstance(parent, (dict, list)):
            continue
        key = path[-1]
        if isinstance(parent, list) and not (isinstance(key, int) and key < len(parent)) or \
                isinstance(parent, dict) and key not in parent:
            continue
        if kind == "drop":
            del parent[key]
        elif kind == "set":
            parent[key] = value(op[2])
        elif kind == "dup" and isinstance(parent, dict):
            # The key written a second time, after the first: the marker key becomes the same name.
            parent[f"{key}\x00DUP"] = value(op[2])
    text = json.dumps(doc, indent=1)
    text = text.replace("\\u0000DUP\"", "\"")
    for i, raw in enumerate(raws):
        text = text.replace(f'"\\u0000RAW{i}\\u0000"', raw)
    data = text.encode()
    name = "report.json"
    for op in data_ops:
        if op[0] != "bytes":
            continue
        how, where = op[1], op[2]
        at = int(len(data) * where)
        if how == "truncate":
            data = data[:at]
        elif how == "bad_utf8":
            data = data[:at] + b"\xff\xc3\x28" + data[at:]
        elif how == "bom":
            data = b"\xef\xbb\xbf" + data
        elif how == "empty":
            data = b""
        elif how == "trailing":
            data = data + b"\n{}garbage"
        else:
            data = gzip.compress(data, compresslevel=1, mtime=0)
            if how == "gzip_named":
                name = "report.json.gz"
    return data, name


def command(ops: list) -> str:
    return next((op[1] for op in ops if op[0] == "command"), "report-json")


def argv(ops: list, mutated: Path, original: Path) -> list[str]:
    """The CLI command a case runs (not for ``api`` and ``dashboard``, which run in :func:`run_api`)."""
    how = command(ops)
    if how.startswith("report-"):
        return ["report", "--format", how[len("report-"):], str(mutated)]
    if how == "gate-run":
        return ["gate", str(mutated), "--min-overlap-pct", "1", "--max-exposed-fraction", "0.9", "--no-config",
                "--format", "json"]
    if how == "gate-baseline":
        return ["gate", str(original), "--baseline", str(mutated), "--max-overlap-drop", "1",
                "--max-exposed-rise", "0.1", "--no-config", "--format", "json"]
    if how == "diff-before":
        return ["diff", str(mutated), str(original), "--format", "json"]
    return ["diff", str(original), str(mutated), "--format", ["text", "markdown", "json"][len(ops) % 3]]


def run_api(ops: list, mutated: Path) -> tuple[int, str, list]:
    """What a notebook does with a saved report: ``api.report``, every table, every figure (the timeline of
    its first rank's first step, read from the trace the report names); or the dashboard's app over it.
    Returns (0, "", the outputs) or (the error's exit code, its one line, []): any other exception is the
    caller's traceback."""
    from tracelens import api
    from tracelens.errors import TracelensError

    try:
        rep = api.report(str(mutated))
        if command(ops) == "dashboard":
            from tracelens.dashboards import Run, Session, create_app

            create_app(Session([Run("A", rep)]))
            return 0, "", []
        from tracelens.notebook import TABLES, VIEWS

        made = []
        for table in TABLES:
            made.append(rep.to_pandas(table))
        for view in VIEWS:
            options = {}
            if view == "timeline":
                if not rep.ranks or not rep.ranks[0].steps:
                    continue
                options = {"rank": rep.ranks[0].rank, "step": rep.ranks[0].steps[0].step}
            try:
                made.append(rep.figure(view, **options))
            except TracelensError as exc:   # a view the report cannot draw says so in one line
                if view != "timeline" or "\n" in str(exc):
                    raise
        return 0, "", made
    except TracelensError as exc:
        return exc.exit_code, f"tracelens: error: {exc}\n", []
