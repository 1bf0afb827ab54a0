"""Shared fixtures: the shared corpus (skipped cleanly when absent) and small trace builders."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
SAMPLES = ROOT / "sample_traces"


def corpus_file(rel: str) -> Path:
    """A corpus file, or a skip with the reason when the shared corpus is not beside the project."""
    path = CORPUS / rel
    if not CORPUS.is_dir():
        pytest.skip(f"shared corpus not found at {CORPUS} (it ships only beside the project, not in a clone)")
    if not path.exists():
        pytest.skip(f"corpus file {rel} is missing")
    return path


def write_trace(path: Path, events: list[dict], gz: bool = False, **top) -> Path:
    """Write a minimal Kineto document with the given events."""
    doc = {"schemaVersion": 1, **top, "traceEvents": events}
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def kernel(name, ts, dur, stream=7, corr=None, device=0, cat="kernel", **args):
    a = {"device": device, "stream": stream, **args}
    if corr is not None:
        a["correlation"] = corr
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur, "args": a}


def host(name, ts, dur, cat="cpu_op", pid=100, tid=100, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
