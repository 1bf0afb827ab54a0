"""The budget figure on every bundled sample: its segments come from the Report, are never negative, and stack
to the rank's duration (copy only = duration - compute - exposed - idle is the busy copy time outside compute
and communication, never below 0 since busy = compute ∪ comm ∪ copies)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tracelens

from conftest import SAMPLES

SAMPLE_DIRS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", SAMPLE_DIRS)
def test_budget_segments_stack_to_the_duration(name):
    pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")
    from tracelens.renderers import figures

    rep = tracelens.report(str(SAMPLES / name))
    for step in (None, *figures.steps_of(rep)):
        for row in figures.budget_rows(rep, step):
            parts = [row[k] for k, _, _ in figures.SEGMENTS]
            assert min(parts) >= 0, (name, step, row)
            assert sum(parts) == row["duration"], (name, step, row)


def test_tracelens_works_without_the_dashboard_extra(tmp_path):
    """Without dash and plotly the core imports and reports; only the HTML format says what is missing."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('dash', 'plotly', 'dash_ag_grid'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from tracelens.cli import main\n"
        f"assert main(['report', {str(SAMPLES / 'wfbp_100')!r}, '--format', 'markdown']) == 0\n"
        f"sys.exit(main(['report', {str(SAMPLES / 'wfbp_100')!r}, '--format', 'html', '-o', 'r.html']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "pip install 'tracelens-overlap[dashboard]'" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "r.html").exists()
