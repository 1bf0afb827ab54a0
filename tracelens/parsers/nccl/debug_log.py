"""NCCL debug logs (``NCCL_DEBUG=INFO``) into records: which lines say what about the network transport.

A log is recognised by its content (`` NCCL INFO ``, ``NCCL WARN``, ``NCCL version``), never by its name.
Lines of many ranks may interleave in one file (a launcher's combined output), behind any launcher prefix
(``[1,7]<stdout>:``, ``[0] ``, a timestamp): the ``host:pid:tid [dev]`` prefix NCCL writes is looked for in
front of the marker. Windows line ends, bytes that are not UTF-8 (decoded as U+FFFD and counted) and a last
line cut short (no line end: left out, since its tail may be missing) are tolerated. A file is read once, a
chunk of bytes at a time, and what NCCL wrote repeated word for word (behind any prefix) is one record with
a count (:func:`_read`), so memory follows the distinct things NCCL said, not the file's size. Nothing here decides a verdict: that is
analyzers/run/transport.py. Line patterns: docs/metrics.md, "Network transport".
"""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

from ...errors import InputError
from ...model import nccl_records as K
from ...model.meta import MAX_WORLD
from ...model.nccl_records import EnvSetting, InspectorLog, NcclInputs, NcclLog, Record
from ...model.rundir_layout import MANIFEST, NCCL_LOGS
from .. import describe_skipped, rundir
from .detect import SNIFF_BYTES
from .inspector import MAX_LINE, VERSIONS, parse_inspector

# The marker as detect.py finds it in a file's head (see there), on one line.
_MARK = re.compile(r"(?:^|\] |:\d+ )NCCL (INFO|WARN)(?: |$)")
_PREFIX = re.compile(r"([^\s:]+):(\d+):(\d+) \[(\d+)\]")
_VERSION = re.compile(r"NCCL version (\d+)\.(\d+)\.(\d+)")
_IFACE = re.compile(r"(?:^|\s)(?:\[\d+\])?([^\s:\[\]]+):")
_IB_DEV = re.compile(r"\[\d+\]([^\s:\[\]]+):(\d+)/(\w+)")
_CONN = re.compile(r"(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)(?:\[[0-9a-fx]+\])? -> (\d+)(?:\[[0-9a-fx]+\])?"
                   r"(?: \[(send|receive)\])? via (.+?)\s*$")
_COLLNET = re.compile(r"^CollNet (\d+)(?:/\d+)? : (\d+) \[(send|receive)\] via (\S+)")
_NET_VIA = re.compile(r"^NET/(.+?)/(\d+)(?:\(\d+\))?(/GDRDMA(?:\(PCI\))?)?")
_COMM_TOPO = re.compile(r"comm (0x[0-9a-fA-F]+) rank (\d+) nRanks (\d+) nNodes (\d+)(?: localRanks (\d+))?")
_COMM_INIT = re.compile(r"comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+)\b.*- Init (START|COMPLETE)")
_COMM_ID = re.compile(r"commId (0x[0-9a-fA-F]+)")
_OLD_RANK = re.compile(r"^rank (\d+) nranks (\d+)\s*$")
_ENV = re.compile(r"^(NCCL_[A-Z0-9_]+) set (?:by environment )?to (.*?)\s*$")
_NET_RESET = re.compile(r"netName reset to NCCL_NET=(\S+)")

# (kind, pattern on the message after the marker, group holding the name or None), tried in order.
_SIMPLE = (
    (K.GDR_HCA, re.compile(r"^NET/(\S+?) ?: ?GPU Direct RDMA (Enabled|Disabled) for HCA \d+ '([^']*)'"), None),
    (K.NET, re.compile(r"^Using network (.+?)\s*$"), 1),
    (K.NO_IB, re.compile(r"NET/IB ?: ?No device found|Net/IB: call to devices\(\) returned 0 devices"), None),
    (K.VERBS_FAIL, re.compile(r"Failed to open (\S*ibverbs\S*)|Count not open (\S+)|Could not open (\S*ibverbs\S*)"),
     None),
    (K.PLUGIN_INIT_FAIL, re.compile(r"^Failed to initialize NET plugin (\S+)"), 1),
    (K.PLUGIN_INIT, re.compile(r"^Initialized NET plugin (\S+)"), 1),
    (K.PLUGIN_ASSIGNED, re.compile(r"^Assigned NET plugin (\S+) to comm"), 1),
    (K.PLUGIN_LOADED, re.compile(r"Successfully loaded external (?:network )?plugin (\S+)|"
                                 r"^NET/Plugin ?: ?Loaded (?:net|network) plugin (\S+)"), None),
    (K.PLUGIN_MISSING, re.compile(r"^NET/Plugin ?: ?No plugin found(?: \(([^)\s]+)\))?|^No network plugin found|"
                                  r"^NET/Plugin ?: ?Plugin load \(([^)\s]+)\) returned|"
                                  r"^NET/Plugin ?: ?Could not find:? (\S+?)\.?$"), None),
    (K.OFI, re.compile(r"^NET/OFI Selected [Pp]rovider is (\S+)"), 1),
)


CHUNK = 1 << 20          # bytes read at a time: what the parse holds of the file besides its records
_CACHE_MOST = 1 << 16    # distinct lines remembered: a line met again after that is parsed again


def parse(path: Path | str, chunk: int = CHUNK) -> NcclLog:
    """The records of one log. A file that cannot be read or holds NUL bytes gives a log without NCCL lines
    (the caller skips it with a warning)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            return _read(f, str(path), chunk)
    except OSError:
        return NcclLog(path=str(path), bytes=0)


def parse_bytes(data: bytes, name: str, chunk: int = CHUNK) -> NcclLog:
    """The records of a log's content (``name``: what evidence lines cite as its file)."""
    return _read(io.BytesIO(data), name, chunk)


def _read(f, name: str, chunk: int) -> NcclLog:
    """One pass over the bytes, ``chunk`` at a time, cut at the last line end (the rest goes with the next).
    A line seen before is not parsed again (of the lines met, the first _CACHE_MOST are remembered), and a
    record that repeats what NCCL wrote word for word (``Record.said``: behind any launcher prefix, a
    timestamp included), from the same process under the communicator it last announced, is counted on the
    first one (the one evidence cites) instead of kept again: a file many ranks wrote, or one log appended
    many times with or without a timestamp per line, keeps one record per distinct thing NCCL said."""
    log = NcclLog(path=name, bytes=0)
    block = f.read(SNIFF_BYTES)          # the head, as detect.py sniffs it, comes first whatever the chunk
    log.bytes = len(block)
    if b"\x00" in block:
        while more := f.read(chunk):
            log.bytes += len(more)
        return log
    seen: dict[bytes, tuple[bool, Record | None, int]] = {}
    # transport.groups() puts a line in the communicator its process last announced: the same words under
    # another communicator are another line for it, so that communicator is part of what makes a repeat.
    current: dict[tuple, str | None] = {}
    kept: dict[tuple, Record] = {}
    number = 0
    rest = b""
    while block:
        lines = (rest + block).split(b"\n") if rest else block.split(b"\n")
        rest = lines.pop()
        for line in lines:
            number += 1
            hit = seen.get(line)
            fresh = hit is None
            if fresh:
                hit = _first(line, name, number)
            nccl, rec, replaced = hit
            if replaced:
                log.replaced += replaced
            if nccl:
                log.nccl_lines += 1
            if rec is not None:
                if rec.kind == K.COMM and rec.data.get("comm"):
                    current[rec.process] = rec.data["comm"]
                key = (rec.said or rec.text, rec.process, current.get(rec.process))
                first = kept.get(key)
                if first is not None:
                    first.count += 1
                else:
                    if rec.line != number:
                        rec = dataclasses.replace(rec, line=number, data=dict(rec.data), count=1)
                    kept[key] = first = rec
                    log.records.append(rec)
                # Remembered with the record kept for it, not its own copy: a line met once (a timestamp on
                # each) then costs its bytes only.
                hit = (nccl, first, replaced)
            if fresh and len(seen) < _CACHE_MOST:
                seen[line] = hit
        block = f.read(chunk)
        log.bytes += len(block)
    log.truncated = bool(rest)
    return log


def _first(line: bytes, name: str, number: int) -> tuple[bool, Record | None, int]:
    """A line met for the first time: whether it is NCCL's, its record (None without a kind) and how many
    of its bytes were not UTF-8."""
    replaced = 0
    if line.isascii():
        text = line.decode("ascii")
    else:
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            text = line.decode("utf-8", errors="replace")
            # Real U+FFFD characters in the file are not replacements; count only what decoding replaced.
            replaced = text.count("\ufffd") - line.count("\ufffd".encode())
    if b"NCCL" not in line:         # both the marker and the version line have it
        return False, None, replaced
    rec = parse_line(text.rstrip("\r"), name, number)
    return rec is not None, rec if rec is not None and rec.kind else None, replaced


def parse_line(text: str, file: str = "", number: int = 0) -> Record | None:
    """The record of one line: None for a line that is not NCCL's, a record with an empty kind for an NCCL
    line that says nothing about the transport."""
    m = _MARK.search(text)
    if m is None:
        v = _VERSION.match(text.strip())
        return None if v is None else Record(K.VERSION, file, number, text.strip(),
                                             data={"version": tuple(map(int, v.groups()))})
    rec = Record("", file, number, text.strip())
    p = None
    for p in _PREFIX.finditer(text, 0, m.end()):
        pass
    if p is not None:
        rec.host, rec.pid, rec.device = p.group(1), p.group(2), int(p.group(4))
    rec.said = text[p.start():].strip() if p is not None else rec.text
    msg = text[m.end():].strip()
    _classify(rec, msg, m.group(1) == "WARN")
    return rec


# Every line of interest has one of these words; most INFO lines (trees, rings, tuning) have none and are
# passed over with one search instead of every pattern.
_WORTH = re.compile(r"via |comm |^rank |NCCL_|^NET|^Net/IB|^Bootstrap|Using network|NET plugin|plugin|ibverbs|"
                    r"Count not open|version|Provider")


def _classify(rec: Record, msg: str, warn: bool) -> None:
    if not _WORTH.search(msg):
        if warn:
            rec.kind, rec.data = K.WARN, {"message": msg}
        return
    if v := _VERSION.search(msg):
        rec.kind, rec.data = K.VERSION, {"version": tuple(map(int, v.groups()))}
        return
    if _conn(rec, msg) or _comm(rec, msg) or _env(rec, msg) or _interfaces(rec, msg):
        return
    for kind, pattern, group in _SIMPLE:
        if m := pattern.search(msg):
            rec.kind = kind
            name = m.group(group) if group else next((g for g in m.groups() if g), None)
            if kind == K.GDR_HCA:
                rec.data = {"net": m.group(1), "enabled": m.group(2) == "Enabled", "hca": m.group(3)}
            elif name is not None:
                rec.data = {"name": name}
            return
    if warn:
        rec.kind, rec.data = K.WARN, {"message": msg}


def _interfaces(rec: Record, msg: str) -> bool:
    for kind, pattern in ((K.SOCKET, r"^NET/Socket ?: ?Using (.*)$"), (K.BOOTSTRAP, r"^Bootstrap ?: ?Using (.*)$"),
                          (K.BOOTSTRAP, r"^NET ?: ?Using interface (.*)$")):   # 2.3: sockets and bootstrap
        if m := re.match(pattern, msg):
            rec.kind, rec.data = kind, {"interfaces": _IFACE.findall(m.group(1))}
            return True
    m = re.match(r"^NET/IB ?: ?(?:Using (.*)|(\[\d+\] ?\S.*))$", msg)
    if m and not (m.group(1) or "").startswith("interface "):       # 2.3: "Using interface X for sideband"
        body = m.group(1) or m.group(2)
        devices = [d for d, _, _ in _IB_DEV.findall(body)] or re.findall(r"^\[\d+\] ?([A-Za-z0-9_]+)", body)
        if devices:
            rec.kind = K.IB
            rec.data = {"devices": devices, "links": [link for _, _, link in _IB_DEV.findall(body)]}
            return True
    return False


def _conn(rec: Record, msg: str) -> bool:
    m = _CONN.search(msg)
    if m:
        src, dst, via = int(m.group(2)), int(m.group(3)), m.group(5)
    elif m := _COLLNET.search(msg):
        src, dst, via = int(m.group(2)), None, m.group(4)
    else:
        return False
    data = {"from": src, "to": dst, "via": via}
    if n := _NET_VIA.match(via):
        data.update(transport="NET", net=n.group(1), gdr=bool(n.group(3)), label=f"NET/{n.group(1)}")
    elif via.startswith("COLLNET"):
        data.update(transport="COLLNET", gdr="GDRDMA" in via, label="COLLNET")
    elif via.startswith("P2P"):
        data.update(transport="P2P", label="/".join(via.split("/")[:2]))
    elif via.startswith("SHM") or via == "direct shared memory":
        data.update(transport="SHM", label="SHM")
    elif via.startswith("NVLS"):
        data.update(transport="NVLS", label="NVLS")
    else:
        data.update(transport="other", label=via.split("/")[0])
    rec.kind, rec.data = K.CONN, data
    return True


def _comm(rec: Record, msg: str) -> bool:
    if m := _COMM_TOPO.search(msg):
        rec.data = {"comm": m.group(1), "rank": int(m.group(2)), "nranks": int(m.group(3)),
                    "nnodes": int(m.group(4)), "local_ranks": int(m.group(5)) if m.group(5) else None}
    elif m := _COMM_INIT.search(msg):
        cid = _COMM_ID.search(msg)
        rec.data = {"comm": m.group(1), "rank": int(m.group(2)), "nranks": int(m.group(3)),
                    "comm_id": cid.group(1) if cid else None}
    elif m := _OLD_RANK.match(msg):
        rec.data = {"comm": None, "rank": int(m.group(1)), "nranks": int(m.group(2))}
    else:
        return False
    rec.kind = K.COMM
    return True


def _env(rec: Record, msg: str) -> bool:
    if m := _ENV.match(msg):
        value = m.group(2)
        # Integer settings are echoed with a full stop ("... to 1."); names and lists are not.
        if value.endswith(".") and value[:-1].lstrip("-").isdigit():
            value = value[:-1]
        rec.kind, rec.data = K.ENV, {"name": m.group(1), "value": value}
        return True
    if m := _NET_RESET.search(msg):
        rec.kind, rec.data = K.ENV, {"name": "NCCL_NET", "value": m.group(1)}
        return True
    return False


# ------------------------------------------------------------------------------------------ the run's logs

_ENV_KEPT = ("WORLD_SIZE", "LOCAL_WORLD_SIZE")      # besides NCCL_*: whether the job spans nodes


def inputs(paths: list[Path], skipped: list[tuple[Path, str]], traces=(), outside=(), inspector=()) -> NcclInputs:
    """The run's NCCL logs parsed (``paths``, the logs a collect manifest lists for the traces, the NCCL
    output an nsys export captured), the NCCL settings recorded beside them (each trace's environment: nsys
    export or manifest; for logs alone, the manifest of their run directory), and notes about what could
    not be read: these logs, and the run directories' manifests (:func:`..rundir.notes`; ``outside``: the
    links found in input folders that lead outside them, not read); ``inspector``: the NCCL Inspector logs
    among the inputs, parsed into columns, with notes on what their lines held that could not be read."""
    wanted = {Path(p).resolve(): Path(p) for p in paths}
    for t in traces:
        for side in t.meta.side_files:
            if side.get("format") == "nccl-log":
                wanted.setdefault(Path(side["path"]).resolve(), Path(side["path"]))
    out = NcclInputs()
    for t in traces:
        out.env += [EnvSetting(t.meta.source, k, v) for k, v in t.meta.env.items()
                    if k.startswith("NCCL_") or k in _ENV_KEPT]
    folders = [Path(t.meta.source).parent for t in traces]
    if not traces:
        folders = list(dict.fromkeys(p.parent.parent for p in wanted.values() if p.parent.name == NCCL_LOGS))
        for folder in folders:
            m = rundir.read_manifest(folder)
            for env in [r.env for r in (m.ranks or ())] + [m.env] if m else []:
                out.env += [EnvSetting(str(folder / MANIFEST), k, v) for k, v in (env or {}).items()
                            if k.startswith("NCCL_") or k in _ENV_KEPT]
    for t in traces:        # NCCL output the trace captured itself (nsys ProcessStreams)
        out.logs += [log for log in (parse_bytes(text.encode(), name) for name, text in t.meta.nccl_text)
                     if log.nccl_lines]
    out.notes += rundir.notes(folders, outside)
    skipped = list(skipped)
    for path in sorted(wanted.values()):
        log = parse(path)
        if log.nccl_lines:
            out.logs.append(log)
        else:
            skipped.append((path, "no NCCL lines"))
    empty = []
    for path in sorted(inspector):
        found = parse_inspector(path)
        if found.records:
            out.inspector.append(found)
        else:
            skipped.append((path, "no NCCL Inspector records"))
            empty.append(found)
    # What the logs without a record held is counted too: a file of one line too long is skipped for it.
    found_notes = _inspector_notes(out.inspector + empty)
    if empty and not out.inspector and not traces and not out.logs:
        # Inspector logs alone, not one record among them: nothing to report, as a trace without events.
        raise InputError(_no_record(empty, found_notes), path=str(empty[0].path))
    out.notes += found_notes
    if skipped:
        out.notes.append(("nccl-log-skipped", len(skipped), describe_skipped(skipped, what="NCCL logs")))
    bad = [log for log in out.logs if log.replaced]
    if bad:
        out.notes.append(("nccl-log-undecodable", sum(log.replaced for log in bad),
                          f"bytes that are not UTF-8 read as U+FFFD in {_names(bad)}"))
    cut = [log for log in out.logs if log.truncated]
    if cut:
        out.notes.append(("nccl-log-truncated", len(cut), f"last line without a line end left out (cut short "
                                                          f"while written?) in {_names(cut)}"))
    return out


def _inspector_notes(logs: list[InspectorLog]) -> list[tuple[str, int, str]]:
    """One note per kind of trouble over every Inspector log: (code, count, message)."""
    notes = []
    for code, attr, what in (
            ("inspector-not-json", "not_json", "lines that are not JSON left out"),
            ("inspector-bad-record", "bad_shape", "records of the wrong shape (a missing field, a value of the "
                                                  "wrong type) left out"),
            ("inspector-unknown-version", "unknown_version", "records of a format version newer than v4.2 "
                                                             "read as v4.2"),
            ("inspector-unknown-fields", "unknown_fields", "records with fields newer than v4.2, ignored"),
            ("world-size-implausible", "implausible_world", f"records of a communicator of more than "
                                                            f"{MAX_WORLD:,} ranks (a corrupt n_ranks) left out"),
            ("inspector-far-times", "far_times", "records whose kernel times lie more than a day from the "
                                                 "median of their log's (a clock jump or garbage) left out"),
            ("inspector-line-too-long", "too_long", f"lines longer than {MAX_LINE >> 20} MiB (no record is) skipped"),
            ("inspector-no-timestamps", "no_timestamps", "records without kernel timestamps "
                                                         "(NCCL_INSPECTOR_DUMP_VERBOSE=0): no arrival times")):
        bad = [log for log in logs if getattr(log, attr)]
        if bad:
            n = sum(getattr(log, attr) for log in bad)
            extra = ""
            if attr == "unknown_version":
                extra = " (" + ", ".join(sorted({v for log in bad for v in log.versions if v not in VERSIONS})) + ")"
            elif attr == "unknown_fields":
                extra = " (" + ", ".join(sorted({f for log in bad for f in log.unknown_names})) + ")"
            notes.append((code, n, f"NCCL Inspector: {what}{extra} in {_names(bad)}"))
    cut = [log for log in logs if log.truncated]
    if cut:
        notes.append(("inspector-truncated", len(cut), f"NCCL Inspector: last line cut short (while written?) left "
                                                        f"out in {_names(cut)}"))
    capped = [log for log in logs if log.inflate_cap]
    if capped:
        most = max(log.inflate_cap for log in capped)
        notes.append(("inspector-inflate-capped", len(capped), (
            f"NCCL Inspector: gzip data inflating past {most:,} bytes (a gzip bomb?) read only up to there in "
            f"{_names(capped)}; set TRACELENS_MAX_INFLATE to a larger size to read it whole")))
    return notes


def _no_record(logs: list[InspectorLog], notes: list[tuple[str, int, str]]) -> str:
    """Why Inspector logs gave no record: what their lines were, by code and count."""
    said = ", ".join(f"{code} {n:,}" for code, n, _ in notes)
    more = f" (and {len(logs) - 1} more log{'s' if len(logs) > 2 else ''})" if len(logs) > 1 else ""
    return f"no readable NCCL Inspector record{more}" + (f": {said}" if said else "")


def _names(logs: list, most: int = 4) -> str:
    names = [Path(log.path).name for log in logs]
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")
