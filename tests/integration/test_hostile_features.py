"""Hostile inputs to the newer features (issue 49): each case once gave a refusal, a traceback or a wrong
number on input that a user may well hand over.

- a gzip trace of several members (``cat a.gz b.gz``, bgzip, log shippers) read as one, as ``gzip -d`` and
  Python's gzip read it; bytes after a member that open no other member refused as corrupt gzip data.
- ``annotate``'s head limit: a trace whose events array opens at 64 MiB or later is refused (it was 128 MiB,
  where docs/errors.md says 64).
- the Python API's arguments: a value of the wrong type is a one-line UsageError (``comm_patterns="xyz_p2p"``
  was seven one-letter patterns, and every kernel communication). Generated values: tests/fuzz/test_api_arguments.py.
- a Report's notebook methods given a list where a name or a rank goes: ``TypeError: unhashable type: 'list'``.
  The dashboard's side of it: tests/dashboard/test_callbacks.py.
"""

from __future__ import annotations

import gzip
import inspect
import json
import pkgutil
import shutil
import zlib
from pathlib import Path

import pytest

import tracelens
from tracelens import annotation_files, api
from tracelens.cli import main
from tracelens.errors import InputError, UsageError
from tracelens.parsers import kineto

from conftest import SAMPLES

TRACE = SAMPLES / "wfbp_100" / "rank0.json.gz"     # one gzip member, 20,278 bytes, 483,716 of JSON


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([*map(str, args)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


# ------------------------------------------------------------------------------- gzip of several members


def _json() -> bytes:
    return gzip.decompress(TRACE.read_bytes())


def _members(*parts: bytes) -> bytes:
    return b"".join(gzip.compress(p, mtime=0) for p in parts)


def _bgzip(raw: bytes) -> bytes:
    """As bgzip writes a file: members of at most 64 KiB of input each, and an empty member last (whose
    trailer, the one a reader finds at the end of the file, says 0 bytes)."""
    return _members(*[raw[i:i + (64 << 10)] for i in range(0, len(raw), 64 << 10)], b"")


VARIANTS = {
    "halves": lambda raw: _members(raw[:len(raw) // 2], raw[len(raw) // 2:]),
    # The first member ends before the "traceEvents" key (byte 392): a folder's sniff must read on.
    "key-in-the-second": lambda raw: _members(raw[:10], raw[10:]),
    "bgzip": _bgzip,
    "NUL padding": lambda raw: gzip.compress(raw, mtime=0) + bytes(512),     # gzip -d skips it, so does Python
}


def _report(capsys, path: Path) -> dict:
    code, out, err = run(capsys, "report", "--format", "json", path)
    assert code == 0, err
    doc = json.loads(out)
    for i in doc["inputs"]:
        assert i.pop("bytes") == Path(i["path"]).stat().st_size     # each file's own size: the one field that differs
    return doc


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_gzip_trace_of_several_members_reports_as_one(variant, tmp_path, capsys):
    one, several = tmp_path / "one" / "rank0.json.gz", tmp_path / "several" / "rank0.json.gz"
    for p in (one, several):
        p.parent.mkdir()
    shutil.copy(TRACE, one)
    several.write_bytes(VARIANTS[variant](_json()))
    assert gzip.decompress(several.read_bytes()) == _json()         # what Python's gzip reads: the same JSON
    # The folder, not the file: a folder's files are sniffed for a trace before they are read.
    expected = json.dumps(_report(capsys, one.parent)).replace(str(one.parent), "DIR")
    assert json.dumps(_report(capsys, several.parent)).replace(str(several.parent), "DIR") == expected


def test_an_annotated_trace_of_several_members_is_the_one_of_one_member(tmp_path, capsys):
    one, several = tmp_path / "one" / "rank0.json.gz", tmp_path / "several" / "rank0.json.gz"
    for p in (one, several):
        p.parent.mkdir()
    shutil.copy(TRACE, one)
    several.write_bytes(VARIANTS["halves"](_json()))
    for p in (one, several):
        code, _, err = run(capsys, "annotate", p, "-o", p.parent / "out")
        assert code == 0, err
    made = [gzip.decompress((p.parent / "out" / "rank0.tracelens.json.gz").read_bytes()) for p in (one, several)]
    # The whole input copied through, both members, with the same events added.
    assert made[1].replace(str(several).encode(), str(one).encode()) == made[0]
    assert len(made[0]) > len(_json())
    assert json.loads(made[1])["traceEvents"][-1] == json.loads(_json())["traceEvents"][-1]


@pytest.mark.parametrize("tail, why", [
    (b"garbage\n", "bytes after gzip member 1 that are not a gzip member"),
    (bytes(64) + b"x", "bytes after gzip member 1 that are not a gzip member"),     # NUL padding, then more
    (b"\x1f", "bytes after gzip member 1 that are not a gzip member"),
    (gzip.compress(b"  ", mtime=0)[:-3], "compressed data ended before the end-of-stream marker"),
], ids=["text", "NUL padding then a byte", "half a gzip magic", "a member cut short"])
def test_bytes_after_a_member_that_open_no_other_are_corrupt_gzip(tail, why, tmp_path, capsys):
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(TRACE.read_bytes() + tail)
    for command in (["report", "--format", "json", path], ["annotate", path, "-o", tmp_path / "out"]):
        code, _, err = run(capsys, *command)
        assert (code, err) == (3, f"tracelens: error: {path}: truncated or corrupt gzip data ({why})\n")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_gzip_bomb_of_many_members_stops_at_the_cap(tmp_path, capsys, monkeypatch):
    # 40 members of 1 MiB of spaces each: every one small, together past the 16 MiB cap.
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(_members(b'{"traceEvents": [', *[b" " * (1 << 20)] * 40, b"]}"))
    monkeypatch.setenv("TRACELENS_MAX_INFLATE", "16M")
    code, _, err = run(capsys, "report", "--format", "json", path)
    assert code == 3 and f"gzip data inflates to more than {16 << 20:,} bytes" in err


def test_the_annotate_api_reads_every_member(tmp_path):
    path = tmp_path / "in" / "rank0.json.gz"
    path.parent.mkdir()
    path.write_bytes(_bgzip(_json()))
    (written,) = api.annotate(path, tmp_path / "out")
    assert json.loads(gzip.decompress(written.read_bytes()))["traceEvents"][-1] == \
        json.loads(_json())["traceEvents"][-1]


# ------------------------------------------------------------------------------------ annotate's head limit


def _padded(path: Path, bracket_at: int) -> Path:
    """The sample trace with blanks before its document, so that the ``[`` of its events is at byte
    ``bracket_at`` of the JSON (gzipped: 64 MiB of spaces are 64 KB)."""
    doc = json.loads(_json())
    text = json.dumps({"traceEvents": doc.pop("traceEvents"), **doc}).encode()
    co = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    path.write_bytes(co.compress(b" " * (bracket_at - text.index(b"["))) + co.compress(text) + co.flush())
    return path


def test_the_head_limit_is_the_documented_64_mib():
    assert kineto.EVENTS_WITHIN == 64 << 20 == 67_108_864       # docs/errors.md: "within its first 64 MiB"


@pytest.mark.parametrize("bracket_at, opens", [((64 << 20) - 1, True), (64 << 20, False)],
                         ids=["the last byte of the head", "the first byte past it"])
def test_events_that_open_at_the_head_limit(bracket_at, opens, tmp_path):
    source = _padded(tmp_path / "rank0.json.gz", bracket_at)
    out = tmp_path / "rank0.tracelens.json.gz"
    added = [b'{"ph": "i", "name": "added", "ts": 0, "pid": 0, "tid": 0, "s": "g"}']
    if not opens:
        with pytest.raises(InputError) as raised:
            annotation_files.write_kineto(source, out, added)
        assert str(raised.value) == (f"{source}: cannot annotate: its 'traceEvents' array does not open within "
                                     "its first 64 MiB (67,108,864 bytes)")
        assert not out.exists()
        return
    annotation_files.write_kineto(source, out, added)
    text = gzip.decompress(out.read_bytes())
    start = bracket_at - len(b'{"traceEvents": ')       # the document after its blanks
    assert not text[:start].strip(b" ") and text[bracket_at:].startswith(b"[\n" + added[0] + b",\n")
    assert json.loads(text[start:])["traceEvents"][1:] == json.loads(_json())["traceEvents"]


def test_annotate_past_the_head_limit_is_one_line_exit_3(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    source = _padded(tmp_path / "in" / "rank0.json.gz", 64 << 20)
    code, _, err = run(capsys, "annotate", source, "-o", tmp_path / "out")
    assert (code, err) == (3, f"tracelens: error: {source}: cannot annotate: its 'traceEvents' array does not "
                              "open within its first 64 MiB (67,108,864 bytes)\n")
    assert not list((tmp_path / "out").iterdir())


# ------------------------------------------------------------------------------ the Python API's arguments

# The public functions of tracelens.api: those of its docstring, the *_with forms the CLI calls, and the
# helpers a caller of load/analyze_rank/combine needs (context, nccl_inputs), the gate's pieces, the drill-down.
PUBLIC = ["analyze", "analyze_rank", "annotate", "annotate_with", "baseline", "combine", "compare_reports",
          "config_file", "context", "diff", "gate", "gate_config", "history_runs", "load", "load_with", "nccl_inputs", "rendered_with", "report",
          "report_with", "step_timeline", "thresholds"]


def test_every_public_function_of_the_api_checks_every_parameter():
    found = sorted(n for n, f in vars(api).items()
                   if inspect.isfunction(f) and f.__module__ == "tracelens.api" and not n.startswith("_"))
    assert found == PUBLIC
    for name in PUBLIC:
        fn = getattr(api, name)
        named = {p.name for p in inspect.signature(fn).parameters.values() if p.kind not in (p.VAR_POSITIONAL,
                                                                                            p.VAR_KEYWORD)}
        assert set(getattr(fn, "kinds", ())) == named, name
    # The top-level names are the same functions, checked alike, also once every subpackage is imported (a
    # subpackage named like a function, imported later, would replace the package's attribute).
    import tracelens.gating.rules  # noqa: F401
    for name, (module, _) in tracelens._LAZY.items():
        if module == "api":
            assert getattr(tracelens, name) is getattr(api, name), name
    assert not {m.name for m in pkgutil.iter_modules(tracelens.__path__)} & set(tracelens._LAZY)


def _kernel_times(rep) -> list[tuple[int, int]]:
    return [(s.comm_ns, s.compute_ns) for r in rep.ranks for s in r.steps]


def test_a_str_for_the_comm_patterns_is_refused_not_read_letter_by_letter():
    with pytest.raises(UsageError) as raised:
        tracelens.report(SAMPLES / "wfbp_100", comm_patterns="xyz_p2p", cache=False)
    assert str(raised.value) == ("report(): comm_patterns must be a list of str (regular expressions), not str "
                                 "'xyz_p2p'; for one, write ['xyz_p2p']")
    # As a list it is one pattern, which no kernel of the sample matches: the default numbers, 12.3 ms of
    # compute a step (letter by letter, '_' matched every kernel: no compute at all).
    times = _kernel_times(tracelens.report(SAMPLES / "wfbp_100", comm_patterns=["xyz_p2p"], cache=False))
    assert times == _kernel_times(tracelens.report(SAMPLES / "wfbp_100", cache=False))
    assert {c for _, c in times} == {12_300_000}


@pytest.mark.parametrize("call, message", [
    (lambda: tracelens.report(SAMPLES / "wfbp_100", thresholds="idle_min_fraction=0.5"),
     "report(): thresholds must be a Thresholds, a list of NAME=VALUE str or None, not str "
     "'idle_min_fraction=0.5'; for one, write ['idle_min_fraction=0.5']"),
    (lambda: tracelens.load(SAMPLES / "wfbp_100", jobs="2"),
     "load(): jobs must be an int of at least 0 or None, not str '2'"),
    (lambda: tracelens.report(SAMPLES / "wfbp_100", cache="no"),
     "report(): cache must be a bool (True or False) or None, not str 'no'"),
    (lambda: tracelens.report(SAMPLES / "wfbp_100", comm_patterns=["nccl", 3]),
     "report(): comm_patterns must be a list of str (regular expressions), not list ['nccl', 3]; it holds int 3"),
    (lambda: api.annotate(SAMPLES / "wfbp_100", b"out"),
     "annotate(): out_dir must be a path (str or os.PathLike), not bytes b'out'"),
    (lambda: api.thresholds("a=1"), "thresholds(): flags must be a list of NAME=VALUE str, not str 'a=1'; "
                                    "for one, write ['a=1']"),
    (lambda: tracelens.report(), "report(): missing a required argument: 'paths'"),
    (lambda: tracelens.report(SAMPLES / "wfbp_100", comm_pattern=["x"]),
     "report(): got an unexpected keyword argument 'comm_pattern'"),
], ids=["thresholds as a str", "jobs as a str", "cache as a str", "a pattern that is no str", "bytes for a path",
        "flags as a str", "no paths", "a misspelt keyword"])
def test_a_wrong_argument_is_a_one_line_usage_error(call, message):
    with pytest.raises(UsageError) as raised:
        call()
    assert str(raised.value) == message


def test_an_iterator_of_patterns_is_read_once():
    rep = tracelens.report(SAMPLES / "wfbp_100", comm_patterns=iter(["xyz_p2p"]), cache=False)
    assert _kernel_times(rep) == _kernel_times(tracelens.report(SAMPLES / "wfbp_100", cache=False))


# ------------------------------------------------------------------------- a Report's notebook methods


@pytest.fixture(scope="module")
def sample_report():
    return tracelens.report(SAMPLES / "wfbp_100")


@pytest.mark.parametrize("call, message", [
    (lambda r: r.to_pandas(["steps"]), "Report.to_pandas(): table must be a str, not list ['steps']"),
    (lambda r: r.figure(["heatmap"]), "Report.figure(): name must be a str, not list ['heatmap']"),
    (lambda r: r.figure("timeline", rank=[0], step=10),
     "Report.figure('timeline'): rank must be an int or None, not list [0]"),
    (lambda r: r.figure("timeline", rank=0, step=[3]),
     "Report.figure('timeline'): step must be an int or None, not list [3]"),
    (lambda r: r.figure("budget", step={3}), "Report.figure('budget'): step must be an int or None, not set {3}"),
    (lambda r: r.figure("heatmap", metric=["overlap_pct"]),
     "Report.figure('heatmap'): metric must be a str, not list ['overlap_pct']"),
    (lambda r: r.figure("strip", step=[2]), "Report.figure('strip'): step must be an int, None or 'all', not list [2]"),
    (lambda r: r.figure("timeline", rank=True, step=3), "Report.figure('timeline'): rank must be an int or None, "
                                                         "not bool True"),
], ids=["a table as a list", "a figure as a list", "a rank as a list (the issue's)", "a step as a list",
        "a step as a set", "a metric as a list", "a strip step as a list", "a rank as a bool"])
def test_a_value_of_the_wrong_kind_in_a_notebook_is_one_line(sample_report, call, message):
    pytest.importorskip("plotly", reason="the dashboard extra (plotly) draws the figures")
    with pytest.raises(UsageError) as raised:
        call(sample_report)
    assert str(raised.value) == message


def test_the_values_of_the_right_kind_are_still_drawn(sample_report):
    pytest.importorskip("plotly", reason="the dashboard extra (plotly) draws the figures")
    # wfbp_100: ranks 0 and 1, steps 2, 3 and 4 (metrics.expected); a step the report lacks is its own error.
    assert sample_report.figure("timeline", rank=1, step=3).layout.title.text.startswith("Rank 1, step 3")
    assert len(sample_report.to_pandas("steps")) == 6
    with pytest.raises(UsageError, match="the timeline needs step= one of rank 0's steps: 2, 3, 4"):
        sample_report.figure("timeline", rank=0, step=10)


# ------------------------------------------------------------------------------ a saved report that lies (item 4)

def saved(tmp_path, edit):
    """The straggler sample's report saved, edited by ``edit(doc)``, written again."""
    out = tmp_path / "report.json"
    if not out.exists():
        assert main(["report", str(SAMPLES / "straggler"), "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    edit(doc)
    edited = tmp_path / f"edited{len(list(tmp_path.glob('edited*')))}.json"
    edited.write_text(json.dumps(doc))
    return edited


def test_a_number_outside_int64_in_a_saved_report_is_refused(tmp_path, capsys):
    # 2^70 loaded, then report.to_pandas("steps") raised pandas' OverflowError.
    path = saved(tmp_path, lambda d: d["ranks"][0]["steps"][0].__setitem__("duration_ns", 2**70))
    capsys.readouterr()
    assert main(["report", str(path)]) == 3
    err = capsys.readouterr().err
    assert err == (f"tracelens: error: {path}: malformed report: $.ranks[0].steps[0].duration_ns is outside the "
                   "int64 range a report's numbers have\n")
    # The largest int64 and the smallest are numbers a report may hold: read.
    ok = saved(tmp_path, lambda d: d["ranks"][0]["steps"][0].__setitem__("duration_ns", 2**63 - 1))
    assert tracelens.report(str(ok)).ranks[0].steps[0].duration_ns == 2**63 - 1


def test_a_trace_is_used_for_a_rank_only_when_it_is_that_rank_s(tmp_path):
    # Ranks 0 and 1 name each other's trace: rank 1's timeline was drawn as rank 0's.
    def swap(d):
        d["inputs"][0]["path"], d["inputs"][1]["path"] = d["inputs"][1]["path"], d["inputs"][0]["path"]
    rep = tracelens.report(str(saved(tmp_path, swap)))
    step = rep.ranks[0].steps[0].step
    with pytest.raises(InputError) as raised:
        api.step_timeline(rep, 0, step)
    assert str(raised.value).endswith("no rank 0 in this trace: it is rank 1's (its distributedInfo)")
    assert str(raised.value).startswith(str(SAMPLES / "straggler" / "rank1.json.gz"))
    # The report as written draws rank 0 from rank 0's file.
    good = tracelens.report(str(saved(tmp_path, lambda d: None)))
    assert api.step_timeline(good, 0, step).rank == 0
