"""Kineto mutations: a plan (a list of JSON-serialisable operations) drawn from a seeded generator, then
applied to a base trace. Plans, not seeds, are what a regression case keeps: a change to how plans are
drawn never changes what a committed case replays.

Operations act on the decoded document (events dropped, duplicated, reordered, fields dropped or retyped,
extreme numbers, deep nesting, step names reused) or on the encoded bytes (invalid UTF-8, truncation,
gzip damaged, truncated, a small bomb, cut into several members or followed by bytes of no member).
"""

from __future__ import annotations

import gzip
import json
import random
import zlib

FIELDS = ["ts", "dur", "ph", "name", "cat", "pid", "tid", "args"]
ARGS = ["device", "stream", "correlation", "External id", "bytes", "Collective name", "In msg nelems",
        "Out msg nelems", "Group size", "dtype", "Process Group Name", "Seq", "Input Dims", "Input type",
        "name", "fromDevice", "toDevice"]
TOP = ["baseTimeNanoseconds", "distributedInfo", "deviceProperties", "traceEvents", "INFO"]
# Values of every JSON type and extreme numbers. ("deep", n) is a list nested n deep; "nan"/"inf" are
# written as the bare tokens NaN/Infinity, which Python's json emits and JSON forbids.
VALUES = ["12", "12.5", "", "abc", "-", None, True, [], [1, 2], {}, {"a": 1}, 0, -1, 1.5, 7.0, 2**31, 2**53,
          2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64, 2**70, -(2**53), -(2**63), -(2**70), 1e300, -1e300, 1e-300,
          "nan", "inf", "-inf", "1e400", ("deep", 50), ("deep", 1200), "ProfilerStep#1", "X", "M", "kernel",
          "cpu_op", "cuda_runtime", "user_annotation", "gpu_memcpy", "cuda_sync", "stream 7"]


# File names (hex of their bytes) that are not UTF-8, look like options, hold spaces, newlines, markup, or are
# long: every path tracelens prints must come out whole and escaped (docs/errors.md, "Hostile input").
FILE_NAMES = ["72616e6bff30", "c328", "eda080", "2d2d666f726d6174", "72616e6b20302028636f707929", "0a72616e6b0a",
              "5b626f6c645d72616e6b", "1b5b33316d", "61" * 200, "2e2e2e", "72616e6b2d33"]


def file_name(ops: list, suffix: str) -> str:
    """The name the trace is written under: the plan's last ``file_name``, else ``trace``; then ``suffix``."""
    names = [op[1] for op in ops if op[0] == "file_name"]
    import os

    return os.fsdecode(bytes.fromhex(names[-1])) + suffix if names else "trace" + suffix


def _value(v):
    if isinstance(v, list) and len(v) == 2 and v[0] == "deep":
        return f"\x00DEEP{v[1]}"       # spliced in after encoding: json.dumps itself recurses
    if v in ("nan", "inf", "-inf"):
        return {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}[v]
    return v


def plan(rng: random.Random, doc: dict) -> list:
    """1 to 4 operations for ``doc`` (a decoded trace)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    n = len(events) if isinstance(events, list) else 0
    ops = []
    for _ in range(rng.choice([1, 1, 2, 2, 3, 4])):
        kind = rng.choices(["drop_field", "retype", "retype_arg", "drop_event", "dup_event", "reorder", "extreme_time",
                            "top", "step_name", "zero_len", "cat", "bad_utf8", "truncate", "gzip", "deep",
                            "file_name"],
                           weights=[10, 16, 8, 4, 4, 4, 10, 6, 4, 3, 4, 4, 4, 5, 2, 3])[0]
        at = rng.randrange(n) if n else 0
        if kind == "drop_field":
            ops.append([kind, at, rng.choice(FIELDS)])
        elif kind == "retype":
            ops.append([kind, at, rng.choice(FIELDS), _plain(rng.choice(VALUES))])
        elif kind == "retype_arg":
            ops.append([kind, at, rng.choice(ARGS), _plain(rng.choice(VALUES))])
        elif kind in ("drop_event", "dup_event", "zero_len"):
            ops.append([kind, at, rng.randrange(1, 50)])
        elif kind == "reorder":
            ops.append([kind, rng.randrange(2**31)])
        elif kind == "extreme_time":
            ops.append([kind, at, rng.choice(["ts", "dur"]), rng.choice([2**53, 2**53 - 1, -(2**53), 2**52, 10**17,
                                                                        -1, 0, 4.5e15, 9007199254740.993,
                                                                        2844460418377108, 86400 * 10**6 * 3])])
        elif kind == "top":
            ops.append([kind, rng.choice(TOP), _plain(rng.choice(VALUES + [2**63 - 10, -(2**63), 1 << 62]))])
        elif kind == "step_name":
            ops.append([kind, at, f"ProfilerStep#{rng.choice([0, 1, 2, 2, 3, -1, 2**64, 'abc', '', ' 2', '2.5'])}"])
        elif kind == "cat":
            ops.append([kind, at, rng.choice(["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "cuda_sync",
                                              "user_annotation", "Kernel", "", "python_function"])])
        elif kind == "bad_utf8":
            ops.append([kind, rng.randrange(2**31), rng.choice(["ff", "c3", "eda080", "f4908080", "c0af"])])
        elif kind == "truncate":
            ops.append([kind, rng.random()])
        elif kind == "file_name":
            ops.append([kind, rng.choice(FILE_NAMES)])
        elif kind == "gzip":
            ops.append([kind, rng.choice(["flip", "cut", "bomb", "trailer", "plain", "members", "members", "garbage"]),
                        rng.randrange(2**31)])
        else:
            ops.append(["retype_arg", at, "Input Dims", ["deep", rng.choice([100, 900, 2000, 5000])]])
    return ops


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def apply(ops: list, doc) -> bytes:
    """The mutated file's bytes (``doc`` is not modified: changed events are copies)."""
    doc = dict(doc) if isinstance(doc, dict) else {"traceEvents": doc}
    events = list(doc.get("traceEvents") or [])
    byte_ops = []
    for op in ops:
        kind = op[0]
        if kind in ("bad_utf8", "truncate", "gzip"):
            byte_ops.append(op)
            continue
        if kind == "file_name":         # where the file is written (file_name), not what it holds
            continue
        n = len(events) if events is not None else 0
        if kind == "top":
            doc[op[1]] = _value(op[2])
            if op[1] == "traceEvents":
                events = None
            continue
        if kind == "reorder":
            random.Random(op[1]).shuffle(events) if events is not None else None
            continue
        if not events:
            continue
        at = op[1] % n
        ev = events[at]
        if not isinstance(ev, dict):
            continue
        ev = dict(ev)
        if isinstance(ev.get("args"), dict):
            ev["args"] = dict(ev["args"])
        if kind == "drop_field":
            ev.pop(op[2], None)
        elif kind == "retype":
            ev[op[2]] = _value(op[3])
        elif kind == "retype_arg":
            if not isinstance(ev.get("args"), dict):
                ev["args"] = {}
            ev["args"][op[2]] = _value(op[3])
        elif kind == "drop_event":
            del events[at:at + op[2]]
            continue
        elif kind == "dup_event":
            events[at:at] = events[at:at + op[2]]
            continue
        elif kind == "zero_len":
            for k in range(at, min(n, at + op[2])):
                if isinstance(events[k], dict):
                    events[k] = {**events[k], "dur": 0}
            continue
        elif kind == "extreme_time":
            ev[op[2]] = op[3]
        elif kind == "step_name":
            ev["name"] = op[2]
            ev.setdefault("cat", "user_annotation")
        elif kind == "cat":
            ev["cat"] = op[2]
        events[at] = ev
    if events is not None:
        doc["traceEvents"] = events
    data = encode(doc)
    for op in byte_ops:
        data = bytes_op(op, data)
    return data


def encode(doc) -> bytes:
    """``doc`` as JSON with each ``_value`` placeholder of deep nesting spliced in; NaN and Infinity come out as
    bare tokens: invalid JSON, on purpose."""
    data = json.dumps(doc).encode()
    while b'"\\u0000DEEP' in data:
        at = data.index(b'"\\u0000DEEP')
        end = data.index(b'"', at + 1)
        depth = int(data[at + 11:end])
        data = data[:at] + b"[" * depth + b"0" + b"]" * depth + data[end + 1:]
    return data


def bytes_op(op: list, data: bytes) -> bytes:
    kind = op[0]
    if kind == "bad_utf8":
        # Inside a string value: right after an opening quote.
        quotes = [i for i in range(0, len(data), max(1, len(data) // 512)) if data[i:i + 1] == b'"']
        at = (quotes[op[1] % len(quotes)] + 1) if quotes else 0
        return data[:at] + bytes.fromhex(op[2]) + data[at:]
    if kind == "truncate":
        return data[:int(len(data) * op[1])]
    how, seed = op[1], op[2]
    if how == "bomb":
        co = zlib.compressobj(9, zlib.DEFLATED, 31)
        # 48 MiB of spaces after the opening brace: past the cap the fuzzer sets (TRACELENS_MAX_INFLATE=32M).
        return b"".join([co.compress(data[:1])] + [co.compress(b" " * (1 << 20)) for _ in range(48)]
                        + [co.compress(data[1:]), co.flush()])
    rng = random.Random(seed)
    if how == "members":
        # As cat a.gz b.gz or bgzip write them: 2 to 5 members cut anywhere, bgzip's empty one last at times.
        cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randrange(1, 5)))
        parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])] + [b""] * rng.randrange(2)
        return b"".join(gzip.compress(part, compresslevel=1, mtime=0) for part in parts)
    gz = bytearray(gzip.compress(data, compresslevel=1, mtime=0))
    if how == "garbage":
        # Bytes after the member that open no other one: NUL padding (read past) or anything else (refused).
        return bytes(gz) + rng.choice([bytes(rng.randrange(1, 600)), b"\x1f", b"\x1f\x8bxx", b"garbage\n",
                                      rng.randbytes(rng.randrange(1, 64))])
    if how == "flip":
        for _ in range(rng.randrange(1, 4)):
            gz[rng.randrange(10, len(gz))] ^= 1 << rng.randrange(8)
    elif how == "cut":
        gz = gz[:rng.randrange(2, len(gz))]
    elif how == "trailer":
        gz[-8:] = bytes(8)                  # CRC and size zeroed
    return bytes(gz)
