"""The speed tricks of tracelens/_speed.py give what the plain way gives, and their fallbacks do too."""

import gc
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tracelens import _speed
from tracelens.columns import frame_of, labels


def _columns(n: int) -> dict:
    return {"start_ns": np.arange(n, dtype=np.int64) * 1000, "cross_device": np.arange(n) % 2 == 0,
            "name": labels(np.arange(n) % 3 - 1, ["nccl:all_reduce", "gemm"]),    # codes -1, 0, 1
            "text": np.array([f"kernel {i}" for i in range(n)], dtype=object),
            "missing": np.array([None] * n, dtype=object)}


@pytest.mark.parametrize("n", [0, 1, 7])
def test_frame_without_the_internal_constructor_is_the_same_frame(n, monkeypatch):
    fast = frame_of(_columns(n))
    monkeypatch.delattr(pd.DataFrame, "_from_arrays")          # as if a pandas release removed it
    plain = frame_of(_columns(n))
    # Object columns stay objects (pandas 3 would make "text" its Arrow string dtype), labels an object Index.
    assert plain.dtypes.tolist() == fast.dtypes.tolist()
    assert fast["text"].dtype == object and fast["missing"].dtype == object
    assert plain.columns.dtype == object and isinstance(plain.index, pd.RangeIndex)
    pd.testing.assert_frame_equal(plain, fast)


def test_ints_from_text_reads_every_int64_and_stops_at_anything_else():
    values = [0, -1, 2**63 - 1, -2**63, 42]               # both int64 bounds
    assert _speed.ints_from_text(",".join(map(str, values))).tolist() == values
    assert _speed.ints_from_text("").tolist() == []
    for text in ("1,2.5,3", "1,x,3", "1,,3", "1e3,2"):       # 3 or 2 values written, not all integers
        out = _speed.ints_from_text(text)
        assert out is None or len(out) < text.count(",") + 1, text


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_pause_restores_the_collector_state(enabled):
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.raises(RuntimeError):
            with _speed.no_cyclic_gc():
                assert not gc.isenabled()
                raise RuntimeError("a parser error")
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_exit_without_teardown_keeps_the_code_and_skips_atexit(tmp_path):
    marker = tmp_path / "atexit-ran"
    code = ("import atexit, pathlib; from tracelens._speed import exit_without_teardown; "
            f"atexit.register(pathlib.Path({str(marker)!r}).touch); exit_without_teardown(5)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 5, proc.stderr
    assert not marker.exists()
