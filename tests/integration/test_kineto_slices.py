"""A big Kineto file decoded a slice at a time (parsers/kineto_slices.py) gives exactly the columns of the
whole-file decode; a file that is not clean goes the whole-file way, with the same result or error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracelens.errors import InputError
from tracelens.parsers import kineto_decode, kineto_slices
from tests.conftest import SAMPLES, corpus_file

FUZZ = Path(__file__).resolve().parents[1] / "fuzz" / "regressions"


def _same(a, b, where=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, kineto_decode.Labels):
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
    monkeypatch.setattr(kineto_slices, "SLICE_BYTES", 1 << 62)
    whole = run()
    monkeypatch.setattr(kineto_slices, "SLICE_BYTES", 0)
    monkeypatch.setattr(kineto_slices, "SLICE_EVENTS", events)
    answers = []
    decode = kineto_slices.decode
    monkeypatch.setattr(kineto_slices, "decode", lambda *a: answers.append(decode(*a)) or answers[-1])
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
