"""NCCL Inspector mutations: a plan drawn from a seeded generator, then applied to the logs the synthetic writer
(fixtures/synth/inspector.py) gives a scenario, one ``<host>-pid<pid>.log`` per rank in an ``nccl-inspector-*``
folder; the report runs on the folder.

Operations act on one log's records (a field dropped or retyped with the Kineto kind's values, extreme numbers
in its sizes, times and ranks, deep nesting, a key written twice, an unknown version or field, another
communicator, lines dropped, duplicated or reordered, a line past MAX_LINE; or a field of every record of every
log, so that none may be readable) or on its bytes (invalid UTF-8,
truncation, bit flips, gzip damaged, cut short, in several members or followed by bytes of no member: the
Kineto kind's byte operations).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from fuzz import kineto_mut

# Bases: a scenario of fixtures.synth and the writer's options.
BASES = {"xrank_shared": {}, "xrank_shared/v4.0": {"version": "v4.0"}, "xrank_shared/gz": {"gz": True},
         "xrank_shared/one_file": {"one_file": True}, "xrank_shared/plain": {"verbose": False},
         "xrank_two_hosts": {}}
FIELDS = ["header", "metadata", "coll_perf", "header.id", "header.rank", "header.n_ranks", "header.nnodes",
          "header.comm_name", "metadata.inspector_output_format_version", "metadata.hostname", "metadata.pid",
          "coll_perf.coll", "coll_perf.coll_sn", "coll_perf.coll_msg_size_bytes", "coll_perf.coll_exec_time_us",
          "coll_perf.coll_timing_source", "coll_perf.coll_algobw_gbs", "coll_perf.coll_busbw_gbs",
          "coll_perf.event_trace_ts", "coll_perf.event_trace_ts.kernel_events",
          "coll_perf.event_trace_ts.kernel_events.0", "coll_perf.event_trace_ts.kernel_events.0.kernel_start_ts",
          "coll_perf.event_trace_ts.kernel_events.1.kernel_stop_ts"]
NUMBERS = ["header.rank", "header.n_ranks", "header.nnodes", "metadata.pid", "coll_perf.coll_sn",
           "coll_perf.coll_msg_size_bytes", "coll_perf.coll_exec_time_us",
           "coll_perf.event_trace_ts.kernel_events.0.kernel_start_ts",
           "coll_perf.event_trace_ts.kernel_events.1.kernel_stop_ts"]
DAY_US = 24 * 3600 * 10**6
HUGE = [2**20, 2**20 + 1, 2**31, 2**53, 2**60, 2**62, 2**63 - 1, 2**63, 2**64, 2**70, -1, -(2**63), 0, 1e308,
        3 * DAY_US, -3 * DAY_US, 1752867229235181 + 2 * DAY_US]


def plan(rng: random.Random, files: int, lines: int) -> list:
    """1 to 4 operations on logs of ``files`` files of about ``lines`` records each."""
    ops = []
    for _ in range(rng.choice([1, 1, 2, 2, 3, 4])):
        kind = rng.choices(["drop_field", "retype", "huge", "shift", "deep", "dup_key", "version", "comm",
                            "drop_line", "dup_line", "reorder", "long_line", "bad_utf8", "truncate", "flip", "gzip",
                            "every"],
                           weights=[8, 16, 12, 4, 3, 4, 3, 3, 3, 3, 2, 1, 3, 5, 4, 6, 6])[0]
        f, at = rng.randrange(files), rng.randrange(max(lines, 1))
        if kind == "every":             # every record of every log: often none readable left (exit 3)
            ops.append([kind, rng.choice(FIELDS), kineto_mut._plain(rng.choice(kineto_mut.VALUES + HUGE))])
        elif kind == "drop_field":
            ops.append([kind, f, at, rng.choice(FIELDS)])
        elif kind == "retype":
            ops.append([kind, f, at, rng.choice(FIELDS), kineto_mut._plain(rng.choice(kineto_mut.VALUES))])
        elif kind == "huge":
            ops.append(["retype", f, at, rng.choice(NUMBERS), rng.choice(HUGE)])
        elif kind == "shift":           # every kernel time of a record moved, as a clock jump would
            ops.append([kind, f, at, rng.choice([DAY_US // 2, 2 * DAY_US, -2 * DAY_US, 10**12, 2**61])])
        elif kind == "deep":
            ops.append(["retype", f, at, rng.choice(FIELDS), ["deep", rng.choice([50, 900, 2000, 5000])]])
        elif kind == "dup_key":
            ops.append([kind, f, at, rng.choice(["header", "metadata", "coll_perf"]),
                        kineto_mut._plain(rng.choice(kineto_mut.VALUES))])
        elif kind == "version":
            ops.append(["retype", f, at, "metadata.inspector_output_format_version",
                        rng.choice(["v4.3", "v5.0", "v3.9", "", "v4.2.1", "4.2"])])
        elif kind == "comm":
            ops.append(["retype", f, at, "header.id", rng.choice(["0xdead", "", "0x7f8c496ae9f661 "])])
        elif kind in ("drop_line", "dup_line"):
            ops.append([kind, f, at, rng.randrange(1, 20)])
        elif kind == "reorder":
            ops.append([kind, f, rng.randrange(2**31)])
        elif kind == "long_line":       # past MAX_LINE (16 MiB): rare, it is written whole
            ops.append([kind, f, at, rng.choice([16 << 20, (16 << 20) + 1])])
        elif kind == "bad_utf8":
            ops.append([kind, f, rng.randrange(2**31), rng.choice(["ff", "c3", "eda080", "f4908080", "c0af"])])
        elif kind == "truncate":
            ops.append([kind, f, rng.random()])
        elif kind == "flip":
            ops.append([kind, f, rng.randrange(2**31), rng.randrange(1, 6)])
        else:
            ops.append([kind, f, rng.choice(["flip", "cut", "trailer", "members", "members", "garbage"]),
                        rng.randrange(2**31)])
    return ops


def logs(base: str, folder: Path) -> list[Path]:
    """The base's logs, written under ``folder`` by the synthetic writer."""
    from fixtures import synth
    from fixtures.synth.inspector import write_inspector

    scenario = base.split("/")[0]
    return sorted(write_inspector(synth.SCENARIOS[scenario], folder, **BASES[base]))


def apply(ops: list, paths: list[Path]) -> None:
    """Each log of ``paths`` rewritten with the operations on it."""
    import gzip

    for f, path in enumerate(paths):
        if not any(op[0] == "every" or op[1] % len(paths) == f for op in ops):
            continue
        data = path.read_bytes()
        gz = data[:2] == b"\x1f\x8b"
        if gz:
            data = gzip.decompress(data)
        mine = []
        for op in ops:
            if op[0] == "every":
                mine += [["retype", f, at, op[1], op[2]] for at in range(data.count(b"\n") + 1)]
            elif op[1] % len(paths) == f:
                mine.append(op)
        data = _records(mine, data)
        for op in mine:
            if op[0] in ("bad_utf8", "truncate"):
                data = kineto_mut.bytes_op([op[0], *op[2:]], data)
            elif op[0] == "flip":
                rng = random.Random(op[2])
                b = bytearray(data)
                for _ in range(op[3]):
                    if b:
                        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
                data = bytes(b)
        if gz and not any(op[0] == "gzip" for op in mine):
            data = gzip.compress(data, mtime=0)
        for op in mine:
            if op[0] == "gzip":
                data = kineto_mut.bytes_op(["gzip", *op[2:]], data)
        path.write_bytes(data)


def _records(ops: list, data: bytes) -> bytes:
    """The record operations on the log's lines (a line that is not JSON is left as it is)."""
    lines = data.split(b"\n")
    tail = lines.pop() if lines and not lines[-1] else None
    for op in ops:
        kind = op[0]
        if not lines or kind in ("bad_utf8", "truncate", "flip", "gzip"):
            continue
        if kind == "reorder":
            random.Random(op[2]).shuffle(lines)
            continue
        at = op[2] % len(lines)
        if kind == "drop_line":
            del lines[at:at + op[3]]
            continue
        if kind == "dup_line":
            lines[at:at] = lines[at:at + op[3]]
            continue
        if kind == "long_line":
            lines[at] = lines[at][:-1] + b',"pad":"' + b"x" * op[3] + b'"}'
            continue
        try:
            rec = json.loads(lines[at])
        except (ValueError, RecursionError):         # nested deeper than Python's decoder goes
            continue
        if kind == "dup_key":           # the key again at the end: a decoder keeps the last one
            body = kineto_mut.encode({op[3]: kineto_mut._value(op[4])})
            lines[at] = kineto_mut.encode(rec)[:-1] + b", " + body[1:]
            continue
        if kind == "shift":
            kernels = _get(_get(_get(rec, "coll_perf"), "event_trace_ts"), "kernel_events")
            for k in kernels if isinstance(kernels, list) else []:
                for key in ("kernel_start_ts", "kernel_stop_ts"):
                    if type(_get(k, key)) is int:
                        k[key] += op[3]
        else:
            _set(rec, op[3], None if kind == "drop_field" else kineto_mut._value(op[4]), drop=kind == "drop_field")
        lines[at] = kineto_mut.encode(rec)
    return b"\n".join(lines + ([tail] if tail is not None else []))


def _get(obj, key: str):
    return obj.get(key) if isinstance(obj, dict) else None


def _set(rec, path: str, value, drop: bool) -> None:
    *where, key = path.split(".")
    at = rec
    for k in where:
        at = at[int(k)] if isinstance(at, list) and k.isdigit() and int(k) < len(at) else \
            at.get(k) if isinstance(at, dict) else None
        if at is None:
            return
    if isinstance(at, list):
        if key.isdigit() and int(key) < len(at):
            if drop:
                del at[int(key)]
            else:
                at[int(key)] = value
    elif isinstance(at, dict):
        if drop:
            at.pop(key, None)
        else:
            at[key] = value
