"""The run directory's manifest (schema ``tracelens.manifest/1``): what ran, where, which rank wrote what, and
how each rank ended; written atomically once the job is over."""

from __future__ import annotations

import json
import os
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from tracelens import outputs
from tracelens._version import __version__
from tracelens.model.envlist import allowed_env
from tracelens.errors import UsageError
from tracelens.model.rundir_layout import MANIFEST, MANIFEST_SCHEMA, NCCL_LOGS, TRACE_SUFFIXES, WORKERS, rank_of

from .launch import CollectOptions, Plan, split_launcher


def read_workers(run_dir: Path) -> list[dict]:
    """The worker records, each with the step count its counter file holds when that is further along (a
    worker killed mid-run never rewrote its record)."""
    out = []
    for path in sorted((run_dir / WORKERS).glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        try:
            counted = int(path.with_suffix(".steps").read_bytes().split()[0])
        except (OSError, ValueError, IndexError):
            counted = None
        if counted is not None and counted > (record.get("steps_seen") or 0):
            record["steps_seen"] = counted
        out.append(record)
    return out


def written_traces(run_dir: Path) -> dict[int, str]:
    """{rank: file name} of the traces (torch traces or nsys reports) written so far."""
    return {r: f.name for f in run_dir.glob("rank*")
            if f.name.endswith(TRACE_SUFFIXES) and (r := rank_of(f.name)) is not None}


def write_manifest(p: Plan, exit_code: int, started: float, ended: float, notes: list[str],
                   interrupted: bool = False, signals_sent: Optional[list[str]] = None,
                   killed_by: Optional[str] = None) -> dict:
    """The run's manifest.json: command, exit code, times, hosts and ranks (with how each ended), versions,
    environment. ``killed_by`` is the signal that ended the job's own process, if one did."""
    signals_sent = signals_sent or []
    run_dir = p.run_dir
    workers = read_workers(run_dir)
    by_rank: dict[int, dict] = {}
    for w in workers:   # a restarted worker writes a new record; keep the newest per rank
        if w["rank"] not in by_rank or w["updated_at"] >= by_rank[w["rank"]]["updated_at"]:
            by_rank[w["rank"]] = w
    traces = written_traces(run_dir)
    exports = {rank_of(f.name): f.name for f in run_dir.glob("rank*.sqlite")}
    logs = {f.name: f for f in (run_dir / NCCL_LOGS).glob("*.log")}
    world = max([w.get("world_size") or 1 for w in workers] + [max(traces, default=-1) + 1, 1])
    ranks, warnings = [], list(notes)
    single = _single_process(p.options.command)
    for rank in range(world):
        w = by_rank.get(rank, {})
        end, end_signal = _rank_end(w, signals_sent, killed_by, single)
        log = f"{w.get('host')}.{w.get('pid')}.log" if w else None
        trace = traces.get(rank)
        status = "written" if trace else "missing"
        if trace and w.get("partial"):
            status = "partial"
        ranks.append({
            "rank": rank, "local_rank": w.get("local_rank"), "host": w.get("host"), "pid": w.get("pid"),
            "trace": trace, "export": exports.get(rank), "status": status,
            "trace_bytes": (run_dir / trace).stat().st_size if trace else None,
            "nccl_log": f"{NCCL_LOGS}/{log}" if log in logs else None, "steps_seen": w.get("steps_seen"),
            "device": w.get("device"), "backend": w.get("backend"), "env": w.get("env", {}),
            "end": end, "signal": end_signal, "cpus": w.get("cpus"),
        })
        if not trace:
            warnings.append(_missing_reason(rank, w, p.options, end, end_signal, killed_by if single else None))
    first = by_rank.get(0) or (workers[0] if workers else {})
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "tool": {"name": "tracelens", "version": __version__},
        "profiler": p.options.profiler,
        "command": p.options.command,
        "argv": p.argv,
        "cwd": os.getcwd(),
        "exit_code": exit_code,
        "interrupted": interrupted,
        "signals_sent": signals_sent,
        "killed_by": killed_by,
        "started_at": _iso(started), "ended_at": _iso(ended), "duration_s": round(ended - started, 3),
        "steps": dict(zip(("wait", "warmup", "active"), p.options.steps)),
        "with_stack": p.options.with_stack,
        "world_size": world,
        "hosts": sorted({w["host"] for w in workers} or {socket.gethostname()}),
        "ranks": ranks,
        "versions": {"python": first.get("python", sys.version.split()[0]), "torch": first.get("torch"),
                     "cuda": first.get("cuda"), "nccl": first.get("nccl"), "tracelens": __version__},
        "env": first.get("env") or allowed_env(p.env),
        "nccl_logs": sorted(f"{NCCL_LOGS}/{name}" for name in logs),
        "warnings": warnings,
    }
    outputs.write_text(run_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest


def _single_process(command: list[str]) -> bool:
    """Whether the command is the worker itself (no torchrun launcher between tracelens and it)."""
    try:
        return split_launcher(command)[0] is None
    except UsageError:
        return False


def _rank_end(w: dict, signals_sent: list[str], killed_by: Optional[str], single: bool):
    """How a worker ended, as (end, signal): ``exited`` (its exit handlers ran; signal: the SIGINT or SIGTERM
    that made it exit, if one did), ``killed`` (it never got to them: a SIGKILL, the out-of-memory killer, a
    hard crash; signal when known) or (None, None) without a worker record."""
    if not w:
        return None, None
    if w.get("exited"):
        return "exited", w.get("exit_signal")
    if "SIGKILL" in signals_sent:
        return "killed", "SIGKILL"       # tracelens sent it to the job's whole process group
    return "killed", killed_by if single else None


def _missing_reason(rank: int, w: dict, options: CollectOptions, end: Optional[str] = None,
                    end_signal: Optional[str] = None, job_killed_by: Optional[str] = None) -> str:
    wait, warmup, active = options.steps
    if not w:
        if job_killed_by:
            return (f"rank {rank}: no trace; killed by {job_killed_by} before its first training step (no optimizer "
                    f"step or tracelens.collectors.step() call had run)")
        return (f"rank {rank}: no trace; the process never reached a training step (no optimizer step or "
                f"tracelens.collectors.step() call), crashed first, or could not load the agent")
    steps = w.get("steps_seen") or 0
    recording = min(max(steps - wait - warmup, 0), active)
    if end == "killed":
        # steps_seen counts the steps after the first (the first starts the profiler, unrecorded).
        how = f"killed by {end_signal}" if end_signal else "ended without running its exit handlers (killed or crashed)"
        if recording:
            return (f"rank {rank}: no trace; {how} after {steps + 1} step(s), {recording} of them in the profiler's "
                    f"active window: a killed process cannot save what it recorded")
        return (f"rank {rank}: no trace; {how} after {steps + 1} step(s), before the profiler's active window "
                f"(wait+warmup={wait + warmup} steps after the first)")
    if end_signal:
        return (f"rank {rank}: no trace; stopped by {end_signal} after {steps + 1} step(s), before the profiler's "
                f"active window (wait+warmup={wait + warmup} steps after the first)")
    return (f"rank {rank}: no trace; the job ran {steps} step(s) after the first, fewer than "
            f"wait+warmup={wait + warmup} (try --steps with smaller counts, e.g. --steps 1,1,{active})")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds")
