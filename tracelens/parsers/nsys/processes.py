"""Nsight Systems SQLite exports (and ``.nsys-rep`` reports through ``nsys export``) -> RankTraces.

Every process that ran GPU work is one rank. Tables and columns are feature-detected (exports from 2021
to 2026 differ, see the shared reference ``nsys-sqlite.md``); joins that need both sides run inside
SQLite, and string ids are resolved once per distinct id, never per row. Times are stored as integer
ns on the capture clock; ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` (when present) anchors them to the
Unix epoch like Kineto's times.

The parser is split by stage, so that each part can be read (and timed) alone: :mod:`.sql` reads the
SQLite tables, :mod:`.rows` turns the rows into per-process columns, :mod:`.nccl_payloads` decodes the
NCCL ranges' payloads (collective sizes; with :mod:`.nvtx_payload` and :mod:`.nccl_layouts`), and this
module, stage 4 of 4, assembles: the entry point :func:`parse`, each process's run metadata (rank,
environment, devices, what the export lacks) and its RankTrace through :mod:`..assemble`. Names with a
leading underscore are private to their module; what other code uses is the package's
(:mod:`tracelens.parsers.nsys`).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ...errors import InputError
from ...model.envlist import allowed_env
from ...model.meta import RunMeta, rank_in_file_name
from ...model.columns import distinct
from ..._speed import no_cyclic_gc
from ...model.table import Table
from ...model import RankTrace
from ...tools.nsys_export import cached_export
from .. import assemble
from .nccl_payloads import nccl_ranges
from .sql import KERNEL, MEMCPY, NVTX, RUNTIME, SYNC, ExportDb, start_queries
from .rows import (by_process, device_columns, device_rows, drop_untimed, host_columns, host_rows, on_epoch,
                   string_ids, thread_rows)

RANK_ENV = ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def parse(path: Path, comm_rules=(), step_pattern: str | None = None) -> list[RankTrace]:
    """One RankTrace per process of the export that ran GPU work."""
    with no_cyclic_gc():
        return _parse(path, comm_rules, step_pattern)


def _parse(path: Path, comm_rules, step_pattern: str | None) -> list[RankTrace]:
    source = path
    if path.suffix.lower() in (".nsys-rep", ".qdrep"):
        path = cached_export(path)
    db = ExportDb(path)
    try:
        return _parse_db(db, source, comm_rules, step_pattern)
    finally:
        db.close()


def _parse_db(db: ExportDb, source: Path, comm_rules, step_pattern: str | None) -> list[RankTrace]:
    if not db.has(KERNEL):
        raise InputError(f"no {KERNEL} table: not an Nsight Systems export with CUDA kernels "
                         "(profile with `nsys profile -t cuda,nvtx`)", path=str(source))
    # Every table is read once for all processes, on reader threads, and split by process here: a query per
    # process would scan every table once per process (no index on globalPid).
    queries = start_queries(db)
    notes = _export_notes(db)
    strings = string_ids(db, notes)
    threads = thread_rows(db, strings)
    base = _base_ns(db)
    device = drop_untimed(device_rows(queries, strings), "start", "end")
    untimed = device.pop("untimed")
    by_pid = "globalPid" in db.columns(KERNEL)
    if by_pid:
        procs = distinct(device["proc"]).tolist()      # the processes with rows in any device table
    host = drop_untimed(host_rows(queries, strings), "start_ns", "end_ns")
    for proc, n in host.pop("untimed").items():
        untimed[proc] = untimed.get(proc, 0) + n
    host_procs = distinct(host["proc"]).tolist()
    if not by_pid:
        # Exports without globalPid (synthetic or trimmed): the only host process owns the GPU rows.
        procs = host_procs[:1] if len(host_procs) == 1 else [0]
    if not procs or not len(device["start"]):
        raise InputError("the export has no GPU activity (the kernel table is empty, or no row has a start "
                         "and an end time)", path=str(source))
    if on_epoch(device["start"], device["end"], base).all():
        raise InputError(f"every GPU activity's time is outside the int64 nanosecond range since the epoch "
                         f"(TARGET_INFO_SESSION_START_TIME.utcEpochNs = {base})", path=str(source))
    envs = _process_env(db)
    streams = _nccl_streams(db, procs)
    ranks = _ranks(envs, procs, source)
    size, device_names = source.stat().st_size, _device_names(db)
    host_name = next((v for n, v in db.pairs("TARGET_INFO_SYSTEM_ENV") if n == "Hostname" and v), None)
    nccl = nccl_ranges(db, queries)
    device_of, host_of = by_process(device), by_process(host)
    traces = []
    for proc in procs:
        dev = device if len(procs) == 1 or not by_pid else device_of(proc)
        meta = RunMeta(source=str(source), format="nsys", bytes=size)
        hst = host_columns(host if host_procs == [proc] else host_of(proc), base, meta)
        meta.warnings.add("nsys-untimed-rows", "skipped activities and API calls with no start or end time "
                          "(NULL in the export)", untimed.get(proc, 0))
        meta.base_ns = base
        rank, rule = ranks[proc]
        if rank is not None:
            meta.rank, meta.rank_rule = rank, rule
        meta.world_size = len(procs) if len(procs) > 1 else None
        meta.device_names = device_names
        meta.host = host_name
        meta.env = _kept_env(envs, proc, len(procs))
        meta.nccl_text = [(f"{source.name}:{name}", text) for name, text in streams.get(proc, [])]
        for code, message, count in notes + nccl.notes.get(proc, []) + nccl.notes.get(None, []):
            meta.warnings.add(code, message, count)
        if not by_pid:
            meta.warnings.add("nsys-no-process-column", "the kernel table has no globalPid column; all GPU rows "
                              "were given to one process", 1)
        dev, hst, _ = assemble.drop_far_times(device_columns(dev, base, meta), hst, meta)
        dev, hst, _ = assemble.canonical(dev, hst)
        own = threads["proc"] == proc
        thr = Table({c: threads[c][own] for c in ("pid", "tid", "name")})
        steps = assemble.steps_from_host(hst, step_pattern, meta.warnings)
        comm_meta = assemble.comm_meta_columns(nccl.comm_meta(hst.pop("nvtx_row")))
        traces.append(assemble.build(meta, dev, hst, steps, thr, comm_meta, comm_rules))
    return traces


def _export_notes(db: ExportDb) -> list[tuple[str, str, int]]:
    notes = []
    for table, code, why in ((RUNTIME, "nsys-no-runtime", "device work cannot be linked to its launch"),
                             (NVTX, "nsys-no-nvtx", "no step ranges or op names (profile with -t cuda,nvtx)"),
                             (MEMCPY, "nsys-no-memcpy", "no copies captured"),
                             (SYNC, "nsys-no-sync", "no GPU-side sync records")):
        if not db.has(table):
            notes.append((code, f"the export has no {table} table: {why}", 1))
    if db.has(RUNTIME) and "eventClass" not in db.columns(RUNTIME):
        notes.append(("nsys-no-event-class", "RUNTIME has no eventClass column: backtrace duplicates cannot be "
                      "told apart", 1))
    diag = 0
    if db.has("DIAGNOSTIC_EVENT") and "severity" in db.columns("DIAGNOSTIC_EVENT"):
        diag = db.rows("SELECT count(*) FROM DIAGNOSTIC_EVENT WHERE severity >= 2")[0][0]
    if diag:
        notes.append(("nsys-diagnostics", "the capture recorded warnings or errors (DIAGNOSTIC_EVENT)", int(diag)))
    return notes


def _base_ns(db: ExportDb) -> int:
    t = "TARGET_INFO_SESSION_START_TIME"
    if db.has(t) and "utcEpochNs" in db.columns(t):
        row = db.rows(f'SELECT "utcEpochNs" FROM {t} LIMIT 1')
        # An offset before 1970 or past 2**63 is corrupt: the capture clock alone is kept then.
        if row and type(row[0][0]) is int and 0 <= row[0][0] < 2**63:
            return int(row[0][0])
    return 0


def _device_names(db: ExportDb) -> list[str]:
    t = "TARGET_INFO_GPU"
    if db.has(t) and "name" in db.columns(t):
        return [str(n) for (n,) in db.rows(f'SELECT DISTINCT "name" FROM {t} WHERE "name" IS NOT NULL')]
    return []


def _process_env(db: ExportDb) -> list[tuple[int, dict[str, str]]]:
    """(pid, environment) of each launched process recorded in META_DATA_CAPTURE (pid 0 = unknown)."""
    procs: dict[str, dict] = {}
    for name, value in db.pairs("META_DATA_CAPTURE"):
        m = re.match(r"^(PROCESS_\d+):(PID|ENVIRONMENT_VARIABLE)$", name)
        if not m:
            continue
        entry = procs.setdefault(m.group(1), {"pid": 0, "env": {}})
        if m.group(2) == "PID":
            entry["pid"] = int(value) if value.isdigit() else 0
        elif "=" in value:
            k, v = value.split("=", 1)
            entry["env"][k] = v.strip('"')
    out = [(e["pid"], e["env"]) for e in procs.values()]
    for name, value in db.pairs("TARGET_INFO_SYSTEM_ENV"):
        if name == "DeviceEnvironment":
            env = dict(kv.split("=", 1) for kv in value.split(";") if "=" in kv)
            out.append((0, env))
    return out


def _nccl_streams(db: ExportDb, procs: list) -> dict:
    """The captured stdout/stderr (``ProcessStreams``) holding NCCL log lines, by process; a stream of a
    process without GPU work (the launcher) goes to the first GPU process. Names are the stream files'."""
    if not (db.has("ProcessStreams") and db.has("StringIds")):
        return {}
    rows = db.rows('SELECT p.globalPid, f.value, c.value FROM ProcessStreams p JOIN StringIds f ON f.id = '
                   "p.filenameId JOIN StringIds c ON c.id = p.contentId WHERE c.value LIKE '%NCCL INFO%' OR "
                   "c.value LIKE '%NCCL WARN%'")
    out: dict = {}
    for gpid, name, text in rows:
        proc = (gpid or 0) >> 24
        out.setdefault(proc if proc in procs else procs[0], []).append((str(name).rsplit("/", 1)[-1], str(text)))
    return out


def _kept_env(envs: list[tuple[int, dict[str, str]]], proc: int, n_procs: int) -> dict[str, str]:
    """The allow-listed settings (envlist.env_allowed) recorded for one process; a lone process also takes the
    environment recorded without a pid."""
    pid = proc & 0xFFFFFF
    out: dict[str, str] = {}
    for p, env in envs:
        if (pid and p == pid) or (not p and n_procs == 1):
            out.update(allowed_env(env))
    return out


def _rank_from_env(env: dict[str, str]) -> int | None:
    for key in RANK_ENV:
        v = env.get(key, "")
        if v.isdigit():
            return int(v)
    return None


def _ranks(envs: list[tuple[int, dict[str, str]]], procs: list[int],
           source: Path) -> dict[int, tuple[int | None, str]]:
    """Rank per process: recorded environment, then the file name, else None (numbered by order later)."""
    out: dict[int, tuple[int | None, str]] = {}
    for proc in procs:
        pid = proc & 0xFFFFFF
        by_pid = [e for p, e in envs if p == pid and pid]
        anon = [e for p, e in envs if not p]
        rank = None
        if by_pid:
            rank = _rank_from_env(by_pid[0])
        elif len(procs) == 1:
            found = [r for r in (_rank_from_env(e) for e in anon) if r is not None]
            rank = found[0] if found else None
        if rank is not None:
            out[proc] = (rank, "environment")
            continue
        from_name = rank_in_file_name(source.name)
        out[proc] = (from_name, "file name") if from_name is not None and len(procs) == 1 else (None, "order")
    return out
