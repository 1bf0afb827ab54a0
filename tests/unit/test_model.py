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
            "from tracelens.model.table import Table\n"
            "end = t.device_ops['end_ns'].copy()\n"
            "end[0] = t.device_ops['start_ns'][0] - 1\n"
            "t.device_ops = Table({**dict(t.device_ops.items()), 'end_ns': end})\n"
            "try:\n    t.validate()\nexcept ModelError as e:\n    print('caught', e)\n")
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "caught device_ops: an event ends before it starts"
