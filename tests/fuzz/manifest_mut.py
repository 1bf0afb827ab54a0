"""Run-directory mutations: a ``tracelens collect`` run folder (bundled samples: one CUDA rank with its NCCL
log, two gloo ranks) whose ``manifest.json`` is changed by a plan, as for traces (:mod:`.kineto_mut`).

The case folder holds the run folder ``run/`` and, beside it, a canary: ``canary.log`` (an NCCL log) and
``canary.json`` (a manifest naming it), which paths in the manifest may name (``../canary.log``, its
absolute path, a link inside the run to it). Operations retype or drop any field (every JSON type,
extreme numbers, deep nesting, values of :data:`.kineto_mut.VALUES`), replace the rank entries, set a
path field to a way out of the folder, change the schema, make the manifest a link to the canary's manifest
or a folder, and damage its bytes (truncation, invalid UTF-8, a byte-order mark, NaN).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

from fuzz import kineto_mut

TOP = ["schema", "world_size", "env", "command", "argv", "ranks", "nccl_logs", "hosts", "tool", "steps",
       "versions", "exit_code"]
ENTRY = ["rank", "env", "nccl_log", "trace", "export", "host", "pid", "status"]
PATH_FIELDS = ["nccl_log", "trace", "export"]
CANARY = "@CANARY@"         # replaced by the canary log's absolute path when written
WAYS_OUT = ["../canary.log", CANARY, "nccl/../../canary.log", "nccl/link.log", "/etc/passwd", "..", ".", "",
            "nccl", "\x00", ["long", 5000], "~/canary.log", "nccl/vm.474.log", "rank0.pt.trace.json.gz",
            "manifest.json", "nccl/missing.log", "file:../canary.log"]
RANKS = [["0", "1"], "0,1", 2, {}, {"0": {"rank": 0}}, [None], [[0]], [{"rank": "0"}], [{"rank": 0}, {"rank": 0}],
         [{"rank": 0, "nccl_log": "../canary.log"}] * 3, ["many", 2000], [{}], []]
# Plans stay small (a case is one line of the driver's output): ["long", n] is a name n letters long,
# ["many", n] n rank entries.


def plan(rng: random.Random, doc: dict) -> list:
    """1 to 4 operations on the manifest ``doc``."""
    n = len(doc.get("ranks") or [])
    ops = []
    for _ in range(rng.choice([1, 1, 2, 2, 3, 4])):
        kind = rng.choices(["retype", "retype_entry", "drop", "way_out", "ranks", "schema", "link", "folder",
                            "bytes"], weights=[12, 12, 4, 14, 5, 3, 2, 1, 6])[0]
        if kind == "retype":
            ops.append([kind, rng.choice(TOP), _plain(rng.choice(kineto_mut.VALUES + [["x", "y"], -5, 10**30]))])
        elif kind == "retype_entry":
            ops.append([kind, rng.randrange(max(n, 1)), rng.choice(ENTRY), _plain(rng.choice(kineto_mut.VALUES))])
        elif kind == "drop":
            ops.append([kind, rng.choice(TOP)])
        elif kind == "way_out":
            field = rng.choice(PATH_FIELDS + ["nccl_logs"])
            ops.append([kind, rng.randrange(max(n, 1)), field, rng.choice(WAYS_OUT)])
        elif kind == "ranks":
            ops.append([kind, rng.choice(RANKS)])
        elif kind == "schema":
            ops.append([kind, rng.choice(["tracelens.manifest/2", "tracelens.manifest", "other/1", 1, None, ""])])
        elif kind in ("link", "folder"):
            ops.append([kind])
        else:
            ops.append([kind, rng.choice(["truncate", "bad_utf8", "bom", "nan", "deep", "empty"]), rng.random()])
    return ops


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def write(ops: list, base: Path, folder: Path) -> Path:
    """The case: the run folder ``base`` copied to ``folder/run`` with its manifest changed by ``ops``, and
    the canary beside it. Returns the run folder."""
    run = folder / "run"
    shutil.copytree(base, run)
    canary = folder / "canary.log"
    logs = sorted((base / "nccl").glob("*.log"))
    canary.write_text(logs[0].read_text() if logs else "vm:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n")
    doc = json.loads((base / "manifest.json").read_text())
    (folder / "canary.json").write_text(json.dumps({**doc, "ranks": [{"rank": r, "nccl_log": "canary.log"}
                                                                    for r in range(2)]}))
    byte_ops, special = [], []
    for op in ops:
        kind = op[0]
        ranks = doc.get("ranks") if isinstance(doc.get("ranks"), list) else None
        if kind == "retype":
            doc[op[1]] = kineto_mut._value(op[2])
        elif kind == "retype_entry" and ranks and isinstance(ranks[op[1] % len(ranks)], dict):
            ranks[op[1] % len(ranks)][op[2]] = kineto_mut._value(op[3])
        elif kind == "drop":
            doc.pop(op[1], None)
        elif kind == "way_out":
            value = str(canary) if op[3] == CANARY else "a" * op[3][1] if isinstance(op[3], list) else op[3]
            if op[3] == "nccl/link.log":
                (run / "nccl").mkdir(exist_ok=True)
                if not (run / "nccl" / "link.log").is_symlink():
                    (run / "nccl" / "link.log").symlink_to("../../canary.log")
            if op[2] == "nccl_logs":
                doc["nccl_logs"] = [value]
            elif ranks and isinstance(ranks[op[1] % len(ranks)], dict):
                ranks[op[1] % len(ranks)][op[2]] = value
        elif kind == "ranks":
            many = isinstance(op[1], list) and op[1][:1] == ["many"]
            doc["ranks"] = [{"rank": r} for r in range(op[1][1])] if many else op[1]
        elif kind == "schema":
            doc["schema"] = op[1]
        elif kind in ("link", "folder"):
            special.append(kind)
        elif kind == "bytes":
            byte_ops.append(op)
    data = json.dumps(doc).encode()
    while b'"\\u0000DEEP' in data:          # lists nested n deep, as kineto_mut writes them
        at = data.index(b'"\\u0000DEEP')
        end = data.index(b'"', at + 1)
        depth = int(data[at + 11:end])
        data = data[:at] + b"[" * depth + b"0" + b"]" * depth + data[end + 1:]
    for _, how, where in byte_ops:
        at = int(len(data) * where)
        data = {"truncate": lambda: data[:at], "bad_utf8": lambda: data[:at] + b"\xff\xc3" + data[at:],
                "bom": lambda: b"\xef\xbb\xbf" + data, "nan": lambda: data[:-1] + b', "x": NaN}',
                "deep": lambda: data[:-1] + b', "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                "empty": lambda: b""}[how]()
    manifest = run / "manifest.json"
    manifest.unlink()
    if "link" in special:
        manifest.symlink_to("../canary.json")
    elif "folder" in special:
        manifest.mkdir()
    else:
        manifest.write_bytes(data)
    return run


def digest(folder: Path) -> dict[str, object]:
    """Every entry under ``folder``: a file by its bytes' hash, a link by its text, a folder as such."""
    import hashlib

    out: dict[str, object] = {}
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(top, name)
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.blake2b(p.read_bytes(), digest_size=8).hexdigest()
            else:
                out[rel] = "folder" if p.is_dir() else "other"
    return out
