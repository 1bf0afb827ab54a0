"""The speed tricks of tracelens/_speed.py give what the plain way gives, and their fallbacks do too."""

import gc
import subprocess
import sys

import pytest

from tracelens import _speed


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
