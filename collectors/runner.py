"""``tracelens collect``: run the planned job (:mod:`.launch`) with every worker profiled, pass signals on
to it, then export the nsys reports and write the manifest (:mod:`.manifest`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tracelens.errors import InputError, UsageError

from .launch import Plan, nccl_logging_notes
from .manifest import read_workers as _workers, write_manifest, written_traces as _traces


@dataclass
class CollectResult:
    run_dir: Path
    exit_code: int
    manifest: dict
    interrupted: bool = False
    signals_sent: list = field(default_factory=list)     # what was passed on to the job, in order


ESCALATION = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


def next_signal(received: int, sent: list[int]) -> signal.Signals:
    """The signal to pass on to the job: SIGINT for a first Ctrl-C, then one step further per signal
    received (SIGTERM, then SIGKILL, which stays); a SIGTERM sent to tracelens starts at SIGTERM."""
    level = ESCALATION.index(received) if received in ESCALATION else 1
    if sent:
        level = max(level, ESCALATION.index(sent[-1]) + 1)
    return ESCALATION[min(level, len(ESCALATION) - 1)]


def execute(p: Plan, on_progress: Optional[Callable[[dict], None]] = None, poll_s: float = 0.25) -> CollectResult:
    """Run the job to the end, forwarding Ctrl-C/SIGTERM to it, then export (nsys) and write the manifest.

    The job runs in its own process group: every signal to tracelens is passed on, one step further each
    time (SIGINT, then SIGTERM, then SIGKILL), so the workers can write the traces they have before they
    exit. Each is announced with a ``signal`` progress event.
    """
    started = time.time()
    sent: list[int] = []
    announce: list[dict] = []
    try:
        proc = subprocess.Popen(p.argv, env=p.env, **_own_process_group())
    except OSError as exc:
        raise UsageError(f"cannot start {p.argv[0]}: {exc.strerror or exc}") from None

    def forward(signum, frame):
        sig = next_signal(signum, sent)
        sent.append(sig)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        following = None if sig == ESCALATION[-1] else next_signal(signal.SIGINT, sent).name
        # Announced from the loop below: writing to stderr inside a signal handler could re-enter a write.
        announce.append({"event": "signal", "received": signal.Signals(signum).name, "sent": sig.name,
                         "next": following})

    def flush() -> None:
        while announce:
            event = announce.pop(0)
            if on_progress:
                on_progress(event)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    seen: set[str] = set()
    try:
        while True:
            flush()
            try:
                code = proc.wait(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                seen = _report_progress(p.run_dir, seen, on_progress)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        flush()
    ended = time.time()
    _report_progress(p.run_dir, seen, on_progress)
    notes = nccl_logging_notes(p.env) + (export_reports(p.run_dir, on_progress) if p.nsys else [])
    killed_by = signal.Signals(-code).name if code < 0 else None
    code = 128 + -code if code < 0 else code
    sent_names = [signal.Signals(s).name for s in sent]
    manifest = write_manifest(p, code, started, ended, notes, interrupted=bool(sent), signals_sent=sent_names,
                              killed_by=killed_by)
    return CollectResult(run_dir=p.run_dir, exit_code=code, manifest=manifest, interrupted=bool(sent),
                         signals_sent=sent_names)


def _own_process_group() -> dict:
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}  # pragma: no cover - Python 3.10


def _report_progress(run_dir: Path, seen: set[str], on_progress) -> set[str]:
    traces = _traces(run_dir)
    now = set(traces.values())
    if on_progress and now - seen:
        world = max([w.get("world_size") or 1 for w in _workers(run_dir)] + [len(now)])
        for name in sorted(now - seen):
            on_progress({"event": "trace", "file": name, "bytes": (run_dir / name).stat().st_size,
                         "ranks": sorted(traces), "world_size": world})
    return now


def export_reports(run_dir: Path, on_progress=None) -> list[str]:
    """``nsys export --type sqlite`` each rank's report; returns notes for reports that failed."""
    from tracelens.tools.nsys_export import cached_export     # lazy: sqlite3, only for nsys runs

    notes = []
    for rep in sorted(run_dir.glob("rank*.nsys-rep")):
        try:
            out = cached_export(rep, beside=True)
            if on_progress:
                on_progress({"event": "export", "file": out.name})
        except InputError as exc:
            notes.append(str(exc))
    return notes


# --------------------------------------------------------------------------------------------- manifest
