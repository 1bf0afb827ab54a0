"""The NCCL debug log parser (``NCCL_DEBUG=INFO`` output): which files are NCCL logs, and what their lines
say about the network transport, as records (:mod:`tracelens.model.nccl_records`).

Its modules: ``detect`` (whether a file is an NCCL log, from its head: what finding the inputs needs),
``debug_log`` (the lines -> records; the run's logs and the NCCL settings recorded beside them, as
``inputs`` for ``combine``) and ``inspector`` (NCCL Inspector's JSON lines -> columns, one row per
collective, which ``inputs`` hands on too). Logs are not traces: no RankTrace comes from here.

The rest of tracelens uses the names below, and only these; each is imported on first use, so that
finding the inputs does not compile the log parser's line patterns.
"""

from ..._speed import lazy_exports

__all__ = ["inputs", "maybe_log", "sniff", "LOG_SUFFIXES", "parse_inspector", "sniff_inspector",
           "INSPECTOR_FOLDER", "sniff_prometheus", "PROMETHEUS_SNAPSHOT"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "inputs": "debug_log",            # the run's NCCL logs parsed, the NCCL settings beside them, notes
    "maybe_log": "detect",            # a file found in a folder is worth reading the head of
    "sniff": "detect",                # "nccl", "binary", "empty" or None, from a file's head
    "LOG_SUFFIXES": "detect",         # names of files meant as logs, NCCL or not
    "parse_inspector": "inspector",   # one Inspector file -> InspectorLog (columns)
    "sniff_inspector": "inspector",   # whether a file is Inspector output, from its first line
    "INSPECTOR_FOLDER": "inspector",  # the plugin's dump folder prefix (nccl-inspector-<job id>)
    "sniff_prometheus": "inspector",  # whether a file is the plugin's Prometheus snapshot (.prom)
    "PROMETHEUS_SNAPSHOT": "inspector",   # why such a file is skipped
})
