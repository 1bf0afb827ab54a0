"""What a first report loads: neither pandas (0.3 s and 60 MB to import) nor numpy.ma (11 ms), on every
path a report takes: Kineto traces across ranks with NCCL logs (cross-rank matching, bandwidth, the transport
verdict), a single rank, and Nsight Systems exports with and without NCCL payloads, rendered in every
format. pyarrow asks for pandas on any ``pa.array``, ``pa.scalar`` or ``to_numpy``, and numpy 2 for numpy.ma
on a plain ``np.unique``, ``np.percentile`` or a float ``np.median``: one such call anywhere fails this."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import SAMPLES, corpus_file

PROBE = ("import sys; from tracelens import api; from tracelens.renderers import render\n"
         "for path in sys.argv[1:]:\n"
         "    rep = api.report(path, cache=False)\n"
         "    for fmt in ('json', 'text', 'markdown'):\n"
         "        render(rep, fmt)\n"
         "print(sorted(m for m in ('pandas', 'numpy.ma', 'pyarrow') if m in sys.modules))")


def loaded(*paths) -> list[str]:
    """What a report of ``paths`` loads of the three, less numpy.ma where ``import numpy`` itself loads it
    (numpy 1.x, which pyproject allows: there no report can avoid it)."""
    proc = subprocess.run([sys.executable, "-c", PROBE, *map(str, paths)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.replace("'", '"'))
    return [m for m in found if not (m == "numpy.ma" and _numpy_loads_ma())]


def _numpy_loads_ma() -> bool:
    probe = "import sys, numpy; print('numpy.ma' in sys.modules)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "True"


def test_kineto_reports_load_neither_pandas_nor_numpy_ma():
    # straggler: four ranks matched across (waits, clocks, bandwidth); cuda_nccl_ddp: NCCL logs in a run
    # directory (the transport verdict and its bandwidth check); wfbp_100: one rank.
    assert loaded(SAMPLES / "straggler", SAMPLES / "cuda_nccl_ddp", SAMPLES / "wfbp_100") == []
    # Steps inferred (param's unmarked loop), collective outliers (one rank's MoE trace).
    assert loaded(corpus_file("kineto_misc/param_single_gpu/linear_kineto.json.gz"),
                  corpus_file("hta/negative_queue_length_values_check/rank0.json.gz")) == []


def test_nsys_reports_load_neither_pandas_nor_numpy_ma():
    with_payloads = corpus_file("nsys/nsys-ai/h100_2gpu_1s.sqlite")     # NCCL payloads: the payload reader
    assert loaded(SAMPLES / "nsys_wfbp_100", with_payloads) == ["pyarrow"]


def test_the_probe_sees_pandas_when_a_report_loads_it():
    # The probe itself can tell: with pyarrow's pandas check forced (a pa.scalar, as pc.list_element makes),
    # pandas shows up.
    code = PROBE.replace("for path", "import pyarrow as pa; pa.scalar(0)\nfor path")
    proc = subprocess.run([sys.executable, "-c", code, str(SAMPLES / "nsys_wfbp_100")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pandas" in proc.stdout
