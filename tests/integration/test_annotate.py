"""``tracelens annotate``: each rank's trace with the added tracks, checked against the Trace Event Format as
Perfetto reads it, read back by tracelens (the same report as its input), and against the Report's own numbers
(every added interval is one of them, to the nanosecond).

The format rules checked, and where they come from:
- Perfetto, "Visualizing external trace formats" (perfetto.dev/docs/getting-started/other-formats, "Chrome
  JSON format"): the UI shows ``X`` (complete) events as slices, ``i``/``I`` as instants, ``C`` as counter
  tracks and ``M`` metadata as process and thread names; duration events must nest on a thread ("Overlapping,
  non-nested events are out of spec", laid on an overflow track) - the FAQ says the same ("Why are overlapping
  events in JSON traces not displayed correctly?").
- Perfetto's JSON importer (src/trace_processor/importers/json/json_trace_parser_impl.cc): pid and tid are
  coerced to unsigned 32-bit integers; an ``X`` event without ``dur`` is dropped; a ``C`` event needs an
  object of numbers in ``args`` (one counter track per key); an instant's scope ``s`` is ``g``, ``p`` or
  ``t`` (thread scope needs a tid); ``thread_name`` and ``process_name`` metadata take ``args.name``. No
  added event is an async or flow event, so none needs an ``id``.
- Kineto writes ``ts`` and ``dur`` in microseconds with three decimals (``4449115285163.963`` in the gloo
  samples): the added events do too, so their times are exact to the nanosecond (the rounding of the format
  is 0 ns; a reader taking them as doubles is within half a nanosecond below 2**43 µs).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sqlite3
from collections import Counter
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from tracelens import api
from tracelens.analyzers import intervals as iv
from tracelens.cli import main
from tracelens.model.annotation import CATEGORY, OVERLAY_HEAD
from tracelens.renderers.added_tracks import PID_BASE

from conftest import SAMPLES

# Every bundled sample of more than one rank (nsys_wfbp_100: one export holding both ranks).
MULTI = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and (
    len(list(p.glob("*.json.gz"))) > 1 or list(p.glob("*.sqlite"))))
TRACKS = {"steps", "exposed communication", "wait for peers", "transfer", "findings"}


def test_the_samples_of_several_ranks_are_all_here():
    assert MULTI == ["compute_bound_8", "gloo_no_sync", "gloo_one_bucket", "gloo_sawtooth", "legacy_wfbp",
                     "nsys_wfbp_100", "one_bucket", "serialized", "straggler", "wfbp_100"]


def _text(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _doc(path: Path, exact: bool = True) -> dict:
    """The JSON of a trace; ``exact``: floats as Decimal, as written."""
    return json.loads(_text(path), parse_float=Decimal if exact else float)


def _ns(us) -> int:
    assert isinstance(us, Decimal) and us.as_tuple().exponent == -3, us       # three decimals, as Kineto
    return int(us * 1000)


class Annotated:
    """One sample annotated: its traces alone copied into ``src`` (a run directory's side files would be read
    by the input's report but not by the output's), the annotated traces in ``out``, the Report."""

    def __init__(self, sample: str, root: Path) -> None:
        self.src, self.out = root / "in", root / "out"
        self.src.mkdir()
        for f in sorted((SAMPLES / sample).glob("*")):
            if f.is_file() and f.suffix in (".gz", ".sqlite"):
                shutil.copy(f, self.src / f.name)
        self.before = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in self.src.iterdir()}
        self.written = api.annotate(self.src, self.out)
        self.report = api.report(self.src)
        self.nsys = sample.startswith("nsys")

    def file_of(self, rank: int) -> Path:
        return next(p for p in self.written if p.name.startswith(f"rank{rank}."))

    def input_of(self, rank: int) -> Path:
        return Path(next(i.path for i in self.report.inputs if i.rank == rank))

    def base_ns(self, rank: int) -> int:
        """What the rank's trace counts its times from, read from the input itself."""
        if self.nsys:
            db = sqlite3.connect(self.input_of(rank))
            return db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        return _doc(self.input_of(rank)).get("baseTimeNanoseconds") or 0


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    made: dict[str, Annotated] = {}

    def get(sample: str) -> Annotated:
        if sample not in made:
            made[sample] = Annotated(sample, tmp_path_factory.mktemp(sample))
        return made[sample]
    return get


def _added(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == CATEGORY]


def _threads(added: list[dict]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in added if e["ph"] == "M" and e["name"] == "thread_name"}


def _slices(added: list[dict], track: str) -> list[dict]:
    """The X events of a track, all its lanes ("wait for peers", "wait for peers (2)", ...)."""
    names = _threads(added)
    return [e for e in added if e["ph"] == "X" and names[e["tid"]].split(" (")[0] == track]


@pytest.mark.parametrize("sample", MULTI)
def test_an_annotated_trace_is_the_trace_event_format(annotated, sample):
    a = annotated(sample)
    ranks = [r.rank for r in a.report.ranks]
    assert sorted(p.name for p in a.written) == sorted(
        f"rank{r}.tracelens.json{'' if a.nsys else '.gz'}" for r in ranks)
    for rank in ranks:
        path = a.file_of(rank)
        doc = _doc(path)
        assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)     # the JSON Object Format
        added, own = _added(doc), [e for e in doc["traceEvents"] if e.get("cat") != CATEGORY]
        if a.nsys:
            # The overlay: the added tracks alone, saying what it is (the head that input discovery skips), on
            # the export's clock: each exposed stretch begins where a kernel of the export begins or ends (in
            # the export's own ns, ts x 1000), or where its step's window does.
            assert own == [] and _text(path).startswith(OVERLAY_HEAD)
            assert doc["otherData"]["rank"] == rank and doc["otherData"]["source"] == str(a.input_of(rank))
            db = sqlite3.connect(a.input_of(rank))
            edges = {t for row in db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL") for t in row}
            windows = {_ns(e["ts"]) for e in _slices(added, "steps")}
            exposed = [_ns(e["ts"]) for e in _slices(added, "exposed communication")]
            assert exposed and set(exposed) <= edges | windows
        else:
            # The rank's own events unchanged and in order, every other key of the document as it was.
            src = _doc(a.input_of(rank))
            assert own == src["traceEvents"]
            assert {k: v for k, v in doc.items() if k != "traceEvents"} == {
                k: v for k, v in src.items() if k != "traceEvents"}
            assert PID_BASE + rank not in {e.get("pid") for e in own}
        assert {e["pid"] for e in added} == {PID_BASE + rank} and PID_BASE + rank < 2**31
        phases = Counter(e["ph"] for e in added)
        assert set(phases) <= {"M", "X", "i", "C"} and phases["X"] > 0 and phases["C"] > 0
        meta = [e for e in added if e["ph"] == "M"]
        assert {e["name"] for e in meta} == {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}
        assert [e["args"]["name"] for e in meta if e["name"] == "process_name"] == [f"tracelens: rank {rank}"]
        names = _threads(added)
        assert {n.split(" (")[0] for n in names.values()} == TRACKS and len(set(names.values())) == len(names)
        for e in added:
            assert isinstance(e["tid"], int) and isinstance(e["name"], str) and isinstance(e["args"], dict)
            if e["ph"] != "M":
                assert e["tid"] in names
                _ns(e["ts"])
            if e["ph"] == "X":
                assert _ns(e["dur"]) >= 0
            elif e["ph"] == "i":
                assert e["s"] == "t" and names[e["tid"]] == "findings"
            elif e["ph"] == "C":
                assert len(e["args"]) == 1 and all(isinstance(v, (int, Decimal)) for v in e["args"].values())
        # Perfetto draws only nested slices on a thread: the added ones never overlap on one.
        for tid in names:
            spans = sorted((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in added
                           if e["ph"] == "X" and e["tid"] == tid)
            assert all(b[0] >= a_[1] for a_, b in zip(spans, spans[1:])), names[tid]


@pytest.mark.parametrize("sample", MULTI)
def test_the_added_intervals_are_the_reports_numbers(annotated, sample):
    a = annotated(sample)
    rep = a.report
    waits_of: dict[tuple, int] = Counter()      # (pg, seq, step) -> the members' waits, summed over the ranks
    cross = {r.rank: r for r in (rep.cross_rank.ranks if rep.cross_rank else [])}
    for r in rep.ranks:
        base = a.base_ns(r.rank)
        doc, plain = _doc(a.file_of(r.rank)), _doc(a.file_of(r.rank), exact=False)
        added, values = _added(doc), _added(plain)
        at = lambda e: _ns(e["ts"]) + base           # noqa: E731 - an event's start on the model's clock
        end = lambda e: at(e) + _ns(e["dur"])         # noqa: E731
        # The step windows, as the metrics count them.
        steps = _slices(added, "steps")
        assert [(at(e), end(e), e["name"]) for e in steps] == [
            (s.start_ns, s.end_ns, f"step {s.step}" if s.step is not None else "whole capture") for s in r.steps]
        # The exposed communication of each step sums to its exposed_comm_ns, to the nanosecond.
        exposed = _slices(added, "exposed communication")
        for s in r.steps:
            inside = [e for e in exposed if s.start_ns <= at(e) < s.end_ns]
            assert all(end(e) <= s.end_ns and e["args"]["step"] == s.step for e in inside)
            assert sum(_ns(e["dur"]) for e in inside) == s.exposed_comm_ns, (r.rank, s.step)
        assert sum(_ns(e["dur"]) for e in exposed) == r.totals.exposed_comm_ns
        # Wait and transfer of each matched collective, on the rank's own clock.
        waits, moves = _slices(added, "wait for peers"), _slices(added, "transfer")
        matched = [c for c in (rep.cross_rank.collectives if rep.cross_rank else []) if r.rank in c.ranks]
        assert len(moves) == sum(c.transfer_ns > 0 for c in matched)
        offset = cross[r.rank].clock_offset_ns if r.rank in cross and cross[r.rank].clock_corrected else 0
        by_key = {(e["args"]["pg"], e["args"]["seq"], e["args"]["step"]): e for e in moves}
        wait_by_key = {(e["args"]["pg"], e["args"]["seq"], e["args"]["step"]): e for e in waits}
        for c in matched:
            i = c.ranks.index(r.rank)
            t = by_key[c.pg, c.seq, c.step]
            assert _ns(t["dur"]) == c.transfer_ns and end(t) == c.ends_ns[i] + (offset or 0)
            w = wait_by_key.get((c.pg, c.seq, c.step))
            if w is not None:
                assert at(w) == c.starts_ns[i] + (offset or 0) and end(w) == at(t)
                waits_of[c.pg, c.seq, c.step] += _ns(w["dur"])
        # ... whose union per step is the step's wait and transfer (wall-clock time, docs/metrics.md).
        if waits or moves:
            moving = iv.union(np.array([at(e) for e in moves], np.int64), np.array([end(e) for e in moves], np.int64))
            waiting = iv.subtract(iv.union(np.array([at(e) for e in waits], np.int64),
                                           np.array([end(e) for e in waits], np.int64)), moving)
            for s in r.steps:
                if s.wait_ns is not None:
                    assert iv.length(iv.clip(waiting, s.start_ns, s.end_ns)) == s.wait_ns
                    assert iv.length(iv.clip(moving, s.start_ns, s.end_ns)) == s.transfer_ns
        # One marker per finding of the rank (and of the run), its verdict as the name, its evidence in args,
        # at its step's start (else the capture's start: before every step).
        marks = [e for e in values if e["ph"] == "i"]
        mine = [d for d in rep.diagnoses if d.rank in (r.rank, -1)]
        assert sorted(e["name"] for e in marks) == sorted(d.title for d in mine)
        starts = {s.step: s.start_ns for s in r.steps}
        for d in mine:
            e = next(e for e in marks if e["name"] == d.title and e["args"]["id"] == d.id
                     and e["args"]["step"] == d.step)
            assert e["args"]["evidence"] == json.loads(json.dumps(d.evidence))
            when = next(at(x) for x in added if x["ph"] == "i" and x["name"] == d.title and x["args"]["step"] == d.step)
            assert when == starts[d.step] if d.step in starts else when <= r.steps[0].start_ns
        # The counters: each step's overlap % and exposed fraction from its start.
        for s in r.steps:
            for name, key, value in (("overlap", "%", s.overlap_pct), ("exposed", "fraction", s.exposed_comm_fraction)):
                got = [e["args"][key] for e, x in zip(values, added) if e["ph"] == "C" and e["name"] == name
                       and at(x) == s.start_ns]
                assert got == [value or 0]
    for c in (rep.cross_rank.collectives if rep.cross_rank else []):
        assert waits_of[c.pg, c.seq, c.step] == c.wait_ns


def _normal(rep, *folders: Path) -> str:
    text = rep.to_json().decode()
    for f in folders:
        text = text.replace(str(f), "DIR")
    data = json.loads(text)
    for i in data["inputs"]:
        i["path"], i["bytes"] = Path(i["path"]).name.split(".")[0], 0
    for r in data["ranks"]:
        r["source"] = Path(r["source"]).name.split(".")[0]
    return json.dumps(data, sort_keys=True)


@pytest.mark.parametrize("sample", MULTI)
def test_tracelens_reads_an_annotated_trace_back_as_its_input(annotated, sample):
    a = annotated(sample)
    if a.nsys:
        # The overlays beside the export are skipped (their head says what they are), with the note every file
        # that is not a trace gets: the report is the export's.
        for p in a.written:
            shutil.copy(p, a.src / p.name)
        both = api.report(a.src)
        assert [w.code for w in both.warnings if w.code == "not-a-trace"] == ["not-a-trace"]
        both.warnings = [w for w in both.warnings if w.code != "not-a-trace"]
        assert _normal(both, a.src) == _normal(a.report, a.src)
        for p in a.written:
            (a.src / p.name).unlink()
    else:
        assert _normal(api.report(a.out), a.out) == _normal(a.report, a.src)
    # And no input was touched.
    assert {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in a.src.iterdir()} == a.before


def test_an_annotated_trace_decoded_in_slices_reads_back_the_same(annotated, monkeypatch):
    # A trace over 64 MB is decoded a slice at a time (parsers/kineto/slices.py): the added events there too.
    from tracelens.parsers.kineto import slices

    a = annotated("gloo_no_sync")
    whole = _normal(api.report(a.out, cache=False, jobs=0), a.out)
    monkeypatch.setattr(slices, "SLICE_BYTES", 1 << 10)
    monkeypatch.setattr(slices, "SLICE_EVENTS", 64)
    assert _normal(api.report(a.out, cache=False, jobs=0), a.out) == whole == _normal(a.report, a.src)


def test_the_added_tracks_are_not_the_ranks_threads(annotated):
    a = annotated("gloo_no_sync")
    for t in api.load(a.out, cache=False, jobs=0):
        assert not (t.threads["pid"] >= PID_BASE).any()
        assert len(t.threads) == len(api.load(a.input_of(t.meta.rank), cache=False, jobs=0)[0].threads)


def run(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_existing_annotation_is_refused_without_force(capsys, tmp_path):
    sample = SAMPLES / "wfbp_100"
    out = tmp_path / "out"
    code, printed, _ = run(capsys, "annotate", sample, "-o", out)
    assert code == 0 and printed.split() == [str(out / "rank0.tracelens.json.gz"), str(out / "rank1.tracelens.json.gz")]
    (out / "notes.txt").write_text("mine")
    first = (out / "rank0.tracelens.json.gz").stat().st_mtime_ns
    code, printed, err = run(capsys, "annotate", sample, "-o", out)
    assert code == 2 and printed == "" and err.count("\n") == 1
    assert "output folder holds annotated traces (rank0.tracelens.json.gz, rank1.tracelens.json.gz)" in err
    assert "--force" in err and (out / "rank0.tracelens.json.gz").stat().st_mtime_ns == first
    code, _, _ = run(capsys, "annotate", sample, "-o", out, "--force")
    assert code == 0 and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "rank0.tracelens.json.gz", "rank1.tracelens.json.gz"]


def test_the_output_is_gzipped_when_its_name_ends_in_gz(tmp_path):
    # A plain Kineto trace gives a plain annotated trace, a gzipped one a gzipped one (by content, not name).
    src = tmp_path / "in"
    src.mkdir()
    (src / "rank0.json").write_bytes(gzip.decompress((SAMPLES / "wfbp_100" / "rank0.json.gz").read_bytes()))
    shutil.copy(SAMPLES / "wfbp_100" / "rank1.json.gz", src / "rank1.json.gz")
    written = api.annotate(src, tmp_path / "out")
    assert [p.name for p in written] == ["rank0.tracelens.json", "rank1.tracelens.json.gz"]
    assert written[0].read_bytes()[:1] == b"{" and written[1].read_bytes()[:2] == b"\x1f\x8b"
    assert json.loads(written[0].read_bytes())["traceEvents"] and json.loads(_text(written[1]))["traceEvents"]


@pytest.mark.parametrize("make, text", [
    (lambda tmp: api.report(SAMPLES / "wfbp_100").to_json(), "a saved report holds no trace to annotate"),
    (None, "already an annotated trace"),
])
def test_what_cannot_be_annotated_is_one_line(capsys, tmp_path, make, text):
    if make is not None:
        (tmp_path / "report.json").write_bytes(make(tmp_path))
        target = tmp_path / "report.json"
    else:
        assert run(capsys, "annotate", SAMPLES / "wfbp_100", "-o", tmp_path / "once")[0] == 0
        target = tmp_path / "once"
    code, out, err = run(capsys, "annotate", target, "-o", tmp_path / "out")
    assert code == 2 and out == "" and text in err and err.count("\n") == 1 and "Traceback" not in err


def test_an_input_is_never_overwritten(capsys, tmp_path):
    # A folder whose trace of rank 1 is named as its annotated trace would be, annotated into itself with
    # --force: that output would be an input, refused before anything is written (rank 0's output included).
    src = tmp_path / "run"
    src.mkdir()
    for r, name in ((0, "a.json.gz"), (1, "rank1.tracelens.json.gz")):
        (src / name).write_bytes((SAMPLES / "wfbp_100" / f"rank{r}.json.gz").read_bytes())
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    code, _, err = run(capsys, "annotate", src, "-o", src, "--force")
    assert code == 2 and "would overwrite an input" in err
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before


def test_nccl_logs_alone_have_nothing_to_annotate(capsys, tmp_path):
    (tmp_path / "nccl").mkdir()
    shutil.copy(next((SAMPLES / "cuda_nccl_avg" / "nccl").iterdir()), tmp_path / "nccl" / "h1.10.log")
    code, _, err = run(capsys, "annotate", tmp_path / "nccl", "-o", tmp_path / "out")
    assert code == 2 and "NCCL logs alone have nothing to annotate" in err


def test_an_output_that_cannot_be_written_is_one_line(capsys, tmp_path):
    (tmp_path / "taken").write_text("a file where the folder goes")
    code, out, err = run(capsys, "annotate", SAMPLES / "wfbp_100", "-o", tmp_path / "taken")
    assert code == 2 and out == "" and "cannot write output" in err and err.count("\n") == 1


def test_a_trace_whose_events_open_past_the_head_limit_is_an_input_error(tmp_path, monkeypatch):
    # The copy looks for the events array in a head of the trace (64 MiB; at the real limit in
    # test_hostile_features.py); past it, exit 3 naming the file.
    from tracelens import annotation_files
    from tracelens.errors import InputError
    from tracelens.parsers import kineto

    doc = json.loads(gzip.decompress((SAMPLES / "wfbp_100" / "rank0.json.gz").read_bytes()))
    src = tmp_path / "in"
    src.mkdir()
    (src / "rank0.json").write_text(json.dumps({"padding": "x" * 50_000, **doc}))
    monkeypatch.setattr(annotation_files, "CHUNK", 1 << 12)
    monkeypatch.setattr(kineto, "EVENTS_WITHIN", 1 << 14)
    with pytest.raises(InputError, match="'traceEvents' array does not open within its first"):
        api.annotate(src, tmp_path / "out")
    assert not list((tmp_path / "out").iterdir())       # nothing half-written left
    monkeypatch.setattr(kineto, "EVENTS_WITHIN", 1 << 20)
    assert [p.name for p in api.annotate(src, tmp_path / "out")] == ["rank0.tracelens.json"]


def test_the_report_options_reach_the_tracks(tmp_path):
    # --steps-from whole: one window over the whole capture, the step track and the exposed sum are that
    # report's (the cache keeps each choice apart, so the analyses read again are the same choice's too).
    written = api.annotate(SAMPLES / "wfbp_100", tmp_path / "out", steps_from="whole")
    rep = api.report(SAMPLES / "wfbp_100", steps_from="whole")
    for r in rep.ranks:
        added = _added(_doc(next(p for p in written if p.name.startswith(f"rank{r.rank}."))))
        assert [e["name"] for e in _slices(added, "steps")] == ["whole capture"] and len(r.steps) == 1
        assert sum(_ns(e["dur"]) for e in _slices(added, "exposed communication")) == r.steps[0].exposed_comm_ns
