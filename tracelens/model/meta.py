"""Run metadata and data-quality warnings: what a parser learns about a trace besides its tables.

Kept free of pandas so that the decode stage (which runs in worker processes, see
:mod:`tracelens.parsers.workers`) can fill it before pandas is imported.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field

_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def rank_in_file_name(name: str) -> int | None:
    """The rank a file name states (``rank3``, ``rank-3``, ``worker_3``, ``%q{RANK}`` outputs), if any."""
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None


@dataclass
class Warning_:
    code: str
    message: str
    count: int = 1


class WarningLog:
    """Data-quality notes, aggregated by code so a report can say "412 events clipped" once."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, Warning_] = OrderedDict()

    def add(self, code: str, message: str, count: int = 1) -> None:
        if count <= 0:
            return
        if code in self._items:
            self._items[code].count += count
        else:
            self._items[code] = Warning_(code, message, count)

    def __iter__(self):
        return iter(self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other) -> bool:
        return isinstance(other, WarningLog) and list(self) == list(other)

    __hash__ = None

    def codes(self) -> list[str]:
        return list(self._items)


# The most ranks a run, or one of its communicators, is taken to have: 2**20, far past any machine built. A
# larger world size said by a trace or a log is corrupt (and would have every rank up to it looked for).
MAX_WORLD = 1 << 20


@dataclass
class RunMeta:
    source: str
    format: str                          # "kineto" | "nsys"
    rank: int | None = None
    rank_rule: str = "unknown"           # distributedInfo | file name | order
    world_size: int | None = None
    backend: str | None = None
    device_names: list[str] = field(default_factory=list)
    base_ns: int = 0
    bytes: int = 0
    pg_config: list[dict] = field(default_factory=list)
    host: str | None = None              # the machine the rank ran on (Kineto host_name, nsys Hostname)
    cpus: int | None = None              # the cores its process could run on (a collect run's manifest)
    env: dict[str, str] = field(default_factory=dict)   # recorded settings that explain results (envlist.env_allowed)
    command: dict[str, str] = field(default_factory=dict)   # settings the run's command line states (bucket_cap_mb)
    side_files: list[dict] = field(default_factory=list)  # {path, format, bytes}: e.g. this rank's NCCL log
    nccl_text: list[tuple[str, str]] = field(default_factory=list)  # (name, text): NCCL log output the trace
                                                                    # itself captured (nsys ProcessStreams)
    warnings: WarningLog = field(default_factory=WarningLog)
    # Notes about the inputs as a whole (files skipped as not traces), reported once with no rank; a load
    # gives them to its first trace only.
    input_warnings: WarningLog = field(default_factory=WarningLog)
