"""Names inside a ``tracelens collect`` run directory, shared by the collector (which writes them, partly
from inside worker processes) and the parsers (which read them). No heavy imports: the agent loads it."""

from __future__ import annotations

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "tracelens.manifest/1"
REPORT = "report.json"
WORKERS = "workers"                    # one JSON record per worker process
NCCL_LOGS = "nccl"                     # NCCL_DEBUG_FILE=<run>/nccl/%h.%p.log
# NCCL_INSPECTOR_DUMP_DIR of collect --nccl-inspector: named as the plugin names its own default folder
# (nccl-inspector-<job id>), so that a run directory and a folder of the plugin's dumps are found alike.
NCCL_INSPECTOR = "nccl-inspector-collect"
BOOTSTRAP = ".tracelens"               # the injected sitecustomize
TORCH_TRACE = "rank{rank}.pt.trace.json.gz"
TRACE_SUFFIXES = (".pt.trace.json.gz", ".nsys-rep")


def rank_of(name: str) -> int | None:
    """The rank in a run-directory file name (``rank3.pt.trace.json.gz`` -> 3), or None."""
    digits = name.removeprefix("rank").split(".")[0] if name.startswith("rank") else ""
    return int(digits) if digits.isdigit() else None
