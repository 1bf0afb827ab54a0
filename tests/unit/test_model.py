"""The model's invariant checks."""

from __future__ import annotations

import subprocess
import sys

from conftest import SAMPLES


def test_validate_raises_real_errors_not_asserts():
    """model.validate must hold under ``python -O`` (asserts vanish there): run it in such an interpreter."""
    code = ("import tracelens\n"
            "from tracelens.model import ModelError\n"
            f"t = tracelens.load({str(SAMPLES / 'wfbp_100')!r})[0]\n"
            "t.device_ops.loc[t.device_ops.index[0], 'end_ns'] = t.device_ops['start_ns'].iloc[0] - 1\n"
            "try:\n    t.validate()\nexcept ModelError as e:\n    print('caught', e)\n")
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "caught device_ops: an event ends before it starts"
