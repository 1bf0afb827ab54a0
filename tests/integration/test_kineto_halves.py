"""One Kineto file decoded on two cores (parsers/kineto/halves.py): a forked worker decodes the events before
a cut, this process those after it, and the joined columns are exactly the whole-file decode's. A cut the
checks cannot trust, and any file that is not clean, goes the whole-file way with the same result or error."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES, corpus_file
from tests.integration.test_kineto_slices import FUZZ, _same, _small_doc
from tracelens import api, pool
from tracelens.errors import InputError
from tracelens.options import ReportOptions
from tracelens.parsers.kineto import decode as kineto_decode
from tracelens.parsers.kineto import halves
from tracelens.renderers import render

PARTS = ("device", "host", "threads", "comm_meta")


def _whole(path: Path):
    try:
        return kineto_decode.decode_file(path)
    except InputError as exc:
        return str(exc)


def _halves(path: Path, share: float = halves.SHARE, monkeypatch=None):
    """The columns the two-core decode gives (a real forked worker), or None where it leaves the file to the
    whole-file decode."""
    if monkeypatch is not None:
        monkeypatch.setattr(halves, "SHARE", share)
        find = halves.find_cut
        monkeypatch.setattr(halves, "find_cut", lambda raw, s=share: find(raw, s))
    helper = halves.Halves(path)
    helper.begin()
    try:
        return helper.take(path)
    finally:
        helper.close()


def _assert_same(path: Path, cols):
    whole = _whole(path)
    assert not isinstance(whole, str), whole
    assert cols is not None, "the two-core decode gave up on a clean file"
    for part in PARTS:
        _same(getattr(whole, part), getattr(cols, part), part)
    assert whole.meta == cols.meta


@pytest.mark.parametrize("rel", ["hta/nccl_parser_config/nccl_data.json.gz",          # NCCL collectives
                                 "hta/df_index_resolver/df_index_resolver.json.gz",    # the 54 MB trace
                                 "kineto_misc/kineto_unit_test_cuda_sync/kineto_after_fix_trace.json",
                                 "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"])
def test_two_core_columns_are_the_whole_file_columns(rel):
    path = corpus_file(rel)
    _assert_same(path, _halves(path))


@pytest.mark.parametrize("share", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_any_share_of_the_events_joins_to_the_same_columns(share, monkeypatch):
    # gloo collectives (comm rows offset across the cut), launch configurations and shapes numbered across it
    path = SAMPLES / "gloo_sawtooth" / "rank0.pt.trace.json.gz"
    _assert_same(path, _halves(path, share, monkeypatch))


def test_ids_first_seen_on_either_side_keep_one_number(monkeypatch, tmp_path):
    # Every event's input shape is one of three texts: the worker's part sees two of them, this process's part
    # the third and one of the others, so the join must renumber what this process numbered alone.
    doc = _small_doc()
    events = doc["traceEvents"]
    for i, e in enumerate(events):
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            where = i / len(events)         # the cut near the middle of the bytes lands among the [[1]]s
            dims = [[1]] if 0.3 <= where < 0.7 or i % 2 else [[2]] if where < 0.3 else [[3]]
            e.setdefault("args", {})["Input Dims"] = dims
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    raw = path.read_bytes()
    cut = halves.find_cut(raw, 0.5)
    before, after = raw[:cut.first_end], raw[cut.second_start:]
    one, two, three = (b'"Input Dims": [[%d]]' % d for d in (1, 2, 3))
    assert one in before and two in before and three not in before        # the texts each side sees first
    assert one in after and three in after and two not in after
    cols = _halves(path, 0.5, monkeypatch)
    _assert_same(path, cols)
    ids = set(cols.host["shapes"].tolist()) - {-1}
    assert ids == set(range(len(ids)))          # one number per text, none skipped


def test_a_bare_array_and_events_before_the_other_keys(monkeypatch, tmp_path):
    doc = _small_doc()
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc["traceEvents"]))
    _assert_same(bare, _halves(bare, 0.5, monkeypatch))
    first = tmp_path / "first.json"
    first.write_text(json.dumps({"traceEvents": doc.pop("traceEvents"), **doc}))
    _assert_same(first, _halves(first, 0.5, monkeypatch))


def test_a_gap_inside_a_string_is_not_trusted(monkeypatch, tmp_path):
    """The first event's name is most of the file and holds "}, {" past the array's middle: the first gap past
    the middle is inside that string, the part before it does not decode, and the file is left to the
    whole-file decode."""
    doc = _small_doc()
    doc["traceEvents"][0]["name"] = "x" * 150_000 + "}, {" + "y" * 50_000     # the rest: ~52 KB
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    raw = path.read_bytes()
    cut = halves.find_cut(raw, 0.5)
    assert cut is not None and raw[cut.first_end - 2:cut.second_start + 2] == b"x}, {y"     # inside the name
    assert _halves(path, 0.5, monkeypatch) is None
    assert not isinstance(_whole(path), str)


def test_no_gap_after_the_share_means_no_cut():
    doc = _small_doc()
    raw = json.dumps({"traceEvents": doc["traceEvents"][:1]}).encode()
    assert halves.find_cut(raw, 0.5) is None


@pytest.mark.parametrize("name", sorted(p.name for p in FUZZ.glob("kineto-*")))
def test_files_that_need_repair_decode_as_before(name):
    path = FUZZ / name
    whole, cols = _whole(path), _halves(path)
    if isinstance(whole, str) or cols is None:
        return          # the whole-file decode reads it (cols None) or says what is wrong: checked below
    for part in PARTS:
        _same(getattr(whole, part), getattr(cols, part), part)
    assert whole.meta == cols.meta


@pytest.mark.parametrize("keep", [0.02, 0.5, 0.97, -1])      # fractions of the file kept; -1: all but one byte
def test_a_truncated_file_is_left_to_the_whole_file_decode(keep, tmp_path):
    raw = json.dumps(_small_doc()).encode()
    path = tmp_path / "rank0.json"
    path.write_bytes(raw[:-1] if keep < 0 else raw[:int(len(raw) * keep)])
    assert _halves(path) is None
    gz = tmp_path / "rank1.json.gz"
    gz.write_bytes(gzip.compress(raw)[:-9])             # a gzip stream cut short
    assert _halves(gz) is None


_NAMES = st.lists(st.sampled_from(list('"\\[]{},: \n\tab')
                                  + ["é", "\u2028", "😀", "traceEvents", "\\u0022", "}, {"]),
                  max_size=10).map("".join)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_NAMES, min_size=1, max_size=8), st.booleans(), st.sampled_from([None, 2]),
       st.floats(0.0, 0.99), st.booleans())
def test_hostile_text_and_keys_in_any_order(monkeypatch, tmp_path, names, events_first, indent, share, gz):
    doc = _small_doc()
    for i, e in enumerate(doc["traceEvents"]):
        e["name"] = names[i % len(names)] + e.get("name", "")
        e.setdefault("args", {})["nested"] = [{"x": names[(i + 1) % len(names)]}, [names[0], "]}"]]
    if events_first:
        doc = {"traceEvents": doc.pop("traceEvents"), **doc}
    text = json.dumps(doc, indent=indent, ensure_ascii=indent is None).encode()
    path = tmp_path / ("rank0.json.gz" if gz else "rank0.json")
    path.write_bytes(gzip.compress(text) if gz else text)
    cols = _halves(path, share, monkeypatch)
    whole = _whole(path)
    if cols is not None:        # given up (a gap in a string): the whole-file decode reads it, as always
        for part in PARTS:
            _same(getattr(whole, part), getattr(cols, part), part)
        assert whole.meta == cols.meta


def test_the_plan_picks_two_cores_for_one_mid_size_kineto_file(monkeypatch, tmp_path):
    monkeypatch.setattr(pool, "cores", lambda: 2)
    monkeypatch.delenv(pool.JOBS_ENV, raising=False)
    big = corpus_file("hta/df_index_resolver/df_index_resolver.json.gz")       # 54 MB of JSON
    assert pool.plan([big], beside=True).halves
    assert not pool.plan([big, big], beside=True).halves                       # two files: file workers
    assert not pool.plan([big], 0, beside=True).halves                         # TRACELENS_JOBS=0: none
    assert pool.plan([big], beside=False).halves                               # a load of it too
    small = SAMPLES / "gloo_sawtooth" / "rank0.pt.trace.json.gz"
    assert not pool.plan([small], beside=True).halves                          # under HALVES_BYTES
    sqlite = tmp_path / "r.sqlite"
    sqlite.write_bytes(b"SQLite format 3\x00" + b"\x00" * (pool.HALVES_BYTES[0] + 10))
    assert not pool.plan([sqlite], beside=True).halves                         # not JSON
    monkeypatch.setattr(pool, "cores", lambda: 1)
    assert not pool.plan([big], beside=True).halves


def test_the_two_core_sizes_end_where_the_slice_decode_begins():
    from tracelens.parsers.kineto import slices

    assert pool.HALVES_BYTES[1] == slices.SLICE_BYTES


def test_a_report_decoded_on_two_cores_is_the_report_decoded_here(monkeypatch):
    """The whole report, JSON and text, with the two-core decode and with none (TRACELENS_JOBS=0)."""
    path = corpus_file("hta/df_index_resolver/df_index_resolver.json.gz")
    monkeypatch.setattr(pool, "cores", lambda: 2)
    took = []
    take = halves.Halves.take
    monkeypatch.setattr(halves.Halves, "take", lambda self, p: took.append(take(self, p)) or took[-1])
    two = api.report_with([path], ReportOptions(cache=False))
    assert took and took[0] is not None
    one = api.report_with([path], ReportOptions(cache=False, jobs=0))
    assert len(took) == 1
    for fmt in ("json", "text", "markdown"):
        assert render(two, fmt) == render(one, fmt)


def test_a_load_decoded_on_two_cores_is_the_load_decoded_here(monkeypatch):
    """api.load of one mid-size file (the dashboard's and the timeline's way in) decodes it in halves: the
    same RankTrace as a load without workers."""
    from tests.integration.test_cache import same_traces

    path = corpus_file("hta/df_index_resolver/df_index_resolver.json.gz")
    monkeypatch.setattr(pool, "cores", lambda: 2)
    took = []
    take = halves.Halves.take
    monkeypatch.setattr(halves.Halves, "take", lambda self, p: took.append(take(self, p)) or took[-1])
    two = api.load(path, cache=False)
    assert took and took[0] is not None
    one = api.load(path, cache=False, jobs=0)
    assert len(took) == 1
    same_traces(two, one)
