"""Config-file mutations: a ``tracelens.toml`` (or the ``[tool.tracelens]`` tables of a ``pyproject.toml``)
with a thresholds table and a gate table, changed by a plan (as traces are, :mod:`.kineto_mut`), then read by
``report --config`` or ``gate --config`` on a bundled sample. Values of every TOML type go where numbers,
booleans and names belong, names no rule has, tables where values belong and the reverse, and the file's
bytes are damaged (not TOML, invalid UTF-8, truncated, nested past any limit).
"""

from __future__ import annotations

import random
from pathlib import Path

THRESHOLDS = ["two_phase_min_tail", "sawtooth_min_overlap_pct", "material_min_ns", "material_min_fraction",
              "stall_min_ns", "tax_confidence", "bandwidth_min_bytes", "clock_max_spread_ns", "no_such_rule"]
GATE = ["min_overlap_pct", "max_exposed_fraction", "max_exposed_ms", "no_critical", "require_pattern",
        "aggregate", "max_overlap_drop", "baseline", "history", "against", "no_such_rule"]
# TOML values as written (text spliced into the file): every type, extremes, nesting.
VALUES = ["0.7", "-1", "0", "1e400", "nan", "inf", "-inf", "9223372036854775807", "9223372036854775808",
          "true", '"0.5"', '"abc"', '""', "[1, 2]", "[]", '["sawtooth", "nope"]', "{a = 1}", "1979-05-27",
          "0x10", '"../../etc/passwd"', '"median"', '"p99"', "[" * 300 + "]" * 300]
COMMANDS = ["report", "gate"]
SAMPLE = "one_bucket"


def plan(rng: random.Random) -> list:
    """1 to 3 changes, then the command that reads the file."""
    ops = [["layout", rng.choice(["tracelens.toml", "pyproject.toml"])]]
    for _ in range(rng.choice([1, 1, 2, 3])):
        kind = rng.choices(["threshold", "gate", "table", "bytes"], weights=[8, 8, 2, 2])[0]
        if kind == "threshold":
            ops.append([kind, rng.choice(THRESHOLDS), rng.choice(VALUES)])
        elif kind == "gate":
            ops.append([kind, rng.choice(GATE), rng.choice(VALUES)])
        elif kind == "table":
            ops.append([kind, rng.choice(["thresholds", "gate"]), rng.choice(['"text"', "1", "[1]", "true"])])
        else:
            ops.append([kind, rng.choice(["truncate", "bad_utf8", "garbage", "empty", "bom"]), rng.random()])
    ops.append(["command", rng.choice(COMMANDS)])
    return ops


def write(ops: list, folder: Path) -> Path:
    """The case's config file in ``folder``."""
    layout = next((op[1] for op in ops if op[0] == "layout"), "tracelens.toml")
    tables = {"thresholds": {"two_phase_min_tail": "0.8"}, "gate": {"min_overlap_pct": "1", "aggregate": '"median"'}}
    whole: dict[str, str] = {}
    damage = []
    for op in ops:
        if op[0] == "threshold":
            tables["thresholds"][op[1]] = op[2]
        elif op[0] == "gate":
            tables["gate"][op[1]] = op[2]
        elif op[0] == "table":
            whole[op[1]] = op[2]            # the table replaced by a value
        elif op[0] == "bytes":
            damage.append(op)
    prefix = "tool.tracelens." if layout == "pyproject.toml" else ""
    lines = ['[project]\nname = "x"\n'] if layout == "pyproject.toml" else []
    for name, table in tables.items():
        if name in whole:
            if prefix:
                lines.append(f"[tool.tracelens]\n{name} = {whole[name]}\n")
            else:
                lines.insert(0, f"{name} = {whole[name]}\n")
            continue
        lines.append(f"[{prefix}{name}]\n" + "".join(f"{k} = {v}\n" for k, v in table.items()))
    data = "\n".join(lines).encode()
    for _, how, where in damage:
        at = int(len(data) * where)
        data = {"truncate": data[:at], "bad_utf8": data[:at] + b"\xff\xfe" + data[at:],
                "garbage": data[:at] + b"[[[ = =\n" + data[at:], "empty": b"", "bom": b"\xef\xbb\xbf" + data}[how]
    path = folder / layout
    path.write_bytes(data)
    return path


def argv(ops: list, config: Path, samples: Path) -> tuple[list[str], dict[str, str]]:
    """The command the case runs, and the environment it needs: ``gate --config FILE``, or a report that
    reads the file named by ``TRACELENS_CONFIG``."""
    command = next((op[1] for op in ops if op[0] == "command"), "report")
    target = str(samples / SAMPLE)
    if command == "gate":
        return ["gate", target, "--config", str(config), "--format", "json"], {}
    return ["report", target, "--format", "json"], {"TRACELENS_CONFIG": str(config)}
