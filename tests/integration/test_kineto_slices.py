"""A big Kineto file decoded a slice at a time (parsers/kineto/slices.py) gives exactly the columns of the
whole-file decode; a file that is not clean goes the whole-file way, with the same result or error."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracelens.errors import InputError
from tracelens.parsers.kineto import decode as kineto_decode, event_columns, inflate, slices, split
from tests.conftest import SAMPLES, corpus_file

FUZZ = Path(__file__).resolve().parents[1] / "fuzz" / "regressions"


def _same(a, b, where=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, event_columns.DecodedLabels):
        assert a.categories == b.categories, where
        assert np.array_equal(a.codes, b.codes), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    else:
        assert a == b, where


def _both(path, monkeypatch, events=97):
    """(whole-file columns or error, sliced columns or error); ``events`` per slice: small, so that even a
    sample file spans many slices and its names, kinds and collectives straddle them."""
    def run():
        try:
            return kineto_decode.decode_file(path)
        except InputError as exc:
            return str(exc)
    monkeypatch.setattr(slices, "SLICE_BYTES", 1 << 62)
    whole = run()
    monkeypatch.setattr(slices, "SLICE_BYTES", 0)
    monkeypatch.setattr(slices, "SLICE_EVENTS", events)
    answers = []
    decode = slices.decode
    monkeypatch.setattr(slices, "decode", lambda *a: answers.append(decode(*a)) or answers[-1])
    sliced = run()
    _both.took_slices = bool(answers) and answers[0] is not None
    return whole, sliced


@pytest.mark.parametrize("rel", ["hta/nccl_parser_config/nccl_data.json.gz",          # NCCL collectives
                                 "kineto_misc/kineto_unit_test_cuda_sync/kineto_after_fix_trace.json",
                                 "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"])
def test_sliced_columns_are_the_whole_file_columns(rel, monkeypatch):
    whole, sliced = _both(corpus_file(rel), monkeypatch)
    assert not isinstance(whole, str) and _both.took_slices
    for part in ("device", "host", "threads", "comm_meta"):
        _same(getattr(whole, part), getattr(sliced, part), part)
    assert whole.meta == sliced.meta


def test_sliced_sample_with_gloo_collectives(monkeypatch):
    whole, sliced = _both(SAMPLES / "gloo_sawtooth" / "rank0.pt.trace.json.gz", monkeypatch, events=5)
    assert _both.took_slices
    for part in ("device", "host", "threads", "comm_meta"):
        _same(getattr(whole, part), getattr(sliced, part), part)
    assert len(whole.comm_meta["row"]) > 0         # the collectives' rows were offset across slices


@pytest.mark.parametrize("name", sorted(p.name for p in FUZZ.glob("kineto-*")))
def test_files_that_need_repair_decode_as_before(name, monkeypatch):
    whole, sliced = _both(FUZZ / name, monkeypatch, events=3)
    if isinstance(whole, str):
        assert sliced == whole
    else:
        _same(whole.device, sliced.device)
        assert whole.meta == sliced.meta


SMALL = SAMPLES / "compute_bound_8" / "rank0.json.gz"     # 241 events, 45 KB of JSON


def _small_doc() -> dict:
    return json.loads(gzip.decompress(SMALL.read_bytes()))


@pytest.mark.parametrize("keep", [0.02, 0.5, 0.97, -1])      # fractions of the file kept; -1: all but one byte
def test_a_truncated_file_gives_the_whole_file_error(keep, monkeypatch, tmp_path):
    raw = json.dumps(_small_doc()).encode()
    path = tmp_path / "rank0.json"
    path.write_bytes(raw[:-1] if keep < 0 else raw[:int(len(raw) * keep)])
    whole, sliced = _both(path, monkeypatch, events=5)
    assert isinstance(whole, str) and "not valid JSON" in whole
    assert sliced == whole


_NAMES = st.lists(st.sampled_from(list('"\\[]{},: \n\tab') + ["é", "\u2028", "😀", "traceEvents", "\\u0022"]),
                  max_size=10).map("".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_NAMES, min_size=1, max_size=8), st.booleans(), st.sampled_from([None, 2]), st.integers(1, 7))
def test_hostile_text_and_keys_in_any_order(monkeypatch, tmp_path, names, events_first, indent, events):
    doc = _small_doc()
    for i, e in enumerate(doc["traceEvents"]):
        e["name"] = names[i % len(names)] + e.get("name", "")
        e.setdefault("args", {})["nested"] = [{"x": names[(i + 1) % len(names)]}, [names[0], "]}"]]
    if events_first:        # the other keys (baseTimeNanoseconds, distributedInfo) after the events
        doc = {"traceEvents": doc.pop("traceEvents"), **doc}
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc, indent=indent, ensure_ascii=indent is None))
    whole, sliced = _both(path, monkeypatch, events=events)
    assert not isinstance(whole, str) and _both.took_slices
    for part in ("device", "host", "threads", "comm_meta"):
        _same(getattr(whole, part), getattr(sliced, part), part)
    assert whole.meta == sliced.meta


@pytest.mark.parametrize("second", [b'"traceEvents"', b'"trace\\u0045vents"'])
def test_a_second_events_key_goes_the_whole_file_way(second, monkeypatch, tmp_path):
    doc = _small_doc()
    events = json.dumps(doc.pop("traceEvents")).encode()
    first = b'[{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "x"}}]'
    # Two keys for the events: the whole-file decode reads the last one, which the scan does not cut.
    path = tmp_path / "rank0.json"
    path.write_bytes(b'{"traceEvents": ' + first + b", " + second + b": " + events + b", "
                     + json.dumps(doc).encode()[1:])
    whole, sliced = _both(path, monkeypatch, events=5)
    assert not isinstance(whole, str) and not _both.took_slices
    _same(whole.device, sliced.device)
    assert len(whole.device["start_ns"]) == 63       # the sample's kernels (the last list's)


def _gz_variants(raw: bytes) -> dict:
    """Gzip streams whose trailer, length or bytes are not what a clean file has."""
    packed = gzip.compress(raw)
    size = len(raw).to_bytes(4, "little")
    return {
        "truncated": packed[:len(packed) // 2],
        "corrupt": packed[:200] + bytes([packed[200] ^ 0xFF]) + packed[201:],
        "trailer-short": packed[:-4] + (len(raw) - 1000).to_bytes(4, "little"),
        "trailer-long": packed[:-4] + (len(raw) + 1000).to_bytes(4, "little"),
        "two-members": packed + gzip.compress(b'{"traceEvents": []}'),
        "padded": gzip.compress(raw + b" " * 5000)[:-4] + size,     # trailer says less than inflates
    }


@pytest.mark.parametrize("variant", ["truncated", "corrupt", "trailer-short", "trailer-long", "two-members",
                                     "padded"])
def test_a_gzip_stream_that_is_not_what_it_says_goes_the_whole_file_way(variant, monkeypatch, tmp_path):
    raw = json.dumps(_small_doc()).encode()
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(_gz_variants(raw)[variant])
    whole, sliced = _both(path, monkeypatch, events=5)
    assert not _both.took_slices
    if isinstance(whole, str):
        assert sliced == whole
    else:
        for part in ("device", "host", "threads", "comm_meta"):
            _same(getattr(whole, part), getattr(sliced, part), part)


@pytest.mark.parametrize("variant", ["halves", "bgzip"])
def test_a_gzip_trace_of_several_members_is_decoded_in_slices_too(variant, monkeypatch, tmp_path):
    """The last member's trailer is not the JSON's size (half of it; bgzip's empty last member: 0): the size
    is counted instead, and the slices read every member."""
    raw = json.dumps(_small_doc()).encode()
    parts = [raw[:len(raw) // 2], raw[len(raw) // 2:]] if variant == "halves" else \
        [raw[i:i + 4096] for i in range(0, len(raw), 4096)] + [b""]
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(b"".join(gzip.compress(p) for p in parts))
    whole, sliced = _both(path, monkeypatch, events=5)
    assert not isinstance(whole, str) and _both.took_slices
    for part in ("device", "host", "threads", "comm_meta"):
        _same(getattr(whole, part), getattr(sliced, part), part)
    assert whole.meta == sliced.meta
    assert len(whole.device["start_ns"]) == 63       # the sample's kernels: both halves read


def test_a_gzip_trace_is_inflated_in_two_passes_a_slice_at_a_time(monkeypatch, tmp_path):
    raw = json.dumps(_small_doc(), indent=1).encode()
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(raw))
    fills = []
    fill = inflate.Inflating.fill
    monkeypatch.setattr(inflate.Inflating, "CHUNK", 512)
    monkeypatch.setattr(inflate.Inflating, "fill", lambda self, upto: fills.append(self.filled) or fill(self, upto))
    monkeypatch.setattr(split, "WINDOW", 4096)
    monkeypatch.setattr(split, "_LOOK", 1024)
    whole, sliced = _both(path, monkeypatch, events=5)
    assert _both.took_slices
    for part in ("device", "host", "threads", "comm_meta"):
        _same(getattr(whole, part), getattr(sliced, part), part)
    # Inflated from the start twice (the scan, then the slices), never all at once: each fill call finds
    # at most a window, its look-ahead and one output chunk (4 x CHUNK) inflated beyond the last.
    restarts = [i for i in range(1, len(fills)) if fills[i] < fills[i - 1]]
    assert len(restarts) == 1
    assert max(b - a for a, b in zip(fills, fills[1:])) < 4096 + 1024 + 4 * 512 < len(raw) // 4
