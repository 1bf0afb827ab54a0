"""What an NCCL debug log says, as records: the parser (parsers/nccl/debug_log.py) fills them and the transport
analyzer (analyzers/run/transport.py) decides on them. Plain data, no heavy imports.

A record is one recognised line: its ``kind``, where it is (file, 1-based line number, text), the process
that printed it (host, pid, device, from the ``host:pid:tid [dev]`` prefix when the line has one) and the
few values the line states (``data``). Lines of no interest are not kept; a line written again word for
word is one record, the first, with a ``count`` (parsers/nccl/debug_log.py says when).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Record kinds (docs/metrics.md, "Network transport", lists the line each one comes from).
VERSION = "version"              # NCCL version 2.18.3+cuda12.2                data: version (tuple)
NET = "net"                      # Using network IB                             data: name
SOCKET = "socket"                # NET/Socket : Using [0]eth0:10.0.0.1<0>       data: interfaces
BOOTSTRAP = "bootstrap"          # Bootstrap : Using eth0:10.0.0.1<0>           data: interfaces
IB = "ib"                        # NET/IB : Using [0]mlx5_0:1/IB ; OOB ...      data: devices
NO_IB = "no-ib"                  # NET/IB : No device found.
VERBS_FAIL = "verbs-fail"        # Failed to open libibverbs.so[.1] / Count not open <lib> (2.30)
PLUGIN_MISSING = "plugin-missing"  # NET/Plugin : No plugin found / Plugin load (x) returned 2   data: name
PLUGIN_LOADED = "plugin-loaded"  # Successfully loaded external plugin x       data: name
PLUGIN_INIT = "plugin-init"      # Initialized NET plugin IB (2.27+)            data: name
PLUGIN_INIT_FAIL = "plugin-init-fail"  # Failed to initialize NET plugin IB (2.27+)  data: name
PLUGIN_ASSIGNED = "plugin-assigned"    # Assigned NET plugin Socket to comm (2.27+)  data: name
OFI = "ofi"                      # NET/OFI Selected Provider is efa (found 16 nics)  data: provider
CONN = "conn"                    # Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
COMM = "comm"                    # comm 0x.. rank 0 nRanks 16 nNodes 2 / Init START / rank 0 nranks 4
ENV = "env"                      # NCCL_IB_DISABLE set by environment to 1.     data: name, value
GDR_HCA = "gdr-hca"              # NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
WARN = "warn"                    # any NCCL WARN line                            data: message


@dataclass(eq=False)          # a line is itself: records are compared (and hashed) by identity
class Record:
    kind: str
    file: str
    line: int
    text: str
    host: str | None = None
    pid: str | None = None
    device: int | None = None
    data: dict = field(default_factory=dict)
    count: int = 1              # lines saying it word for word (same process and communicator); this the first
    # What NCCL wrote, from its host:pid:tid [dev] prefix on: a launcher's or log shipper's prefix in front
    # (a timestamp on every line) does not make a line another one. The whole text where NCCL's prefix is
    # missing (a launcher's rank tag may then be all that tells two processes apart).
    said: str = ""

    @property
    def process(self) -> tuple:
        """The process that printed the line; a line without a prefix belongs to its file."""
        return (self.host, self.pid) if self.pid is not None else (self.file,)


@dataclass
class NcclLog:
    """One NCCL log file: its recognised lines and what reading it met."""

    path: str
    bytes: int
    records: list[Record] = field(default_factory=list)
    nccl_lines: int = 0              # lines with NCCL INFO / NCCL WARN / NCCL version
    replaced: int = 0                # bytes that were not UTF-8 (decoded as U+FFFD)
    truncated: bool = False          # the last line had no line end and was left out


@dataclass
class EnvSetting:
    """An NCCL variable recorded outside the logs (collect manifest, nsys export): where, name, value."""

    source: str
    name: str
    value: str


# The columns of an Inspector log, one row per record (parsers/nccl/inspector.py fills them as int64, float64
# for the bandwidths; -1 where a record does not say): the process (code into ``processes``), the
# communicator (code into ``comms``), the process's rank in it and its size and node count, the record's kind
# (0 collective, 1 point-to-point), its op (code into ``ops``, named as the collective tables name them), its
# sequence number in the communicator, message size as written, exec time, the kernel start and end (the
# earliest channel start and latest channel stop of a verbose event trace, on the host's clock), the
# timing source (code into ``timing``), the peer of a point-to-point record, and the bandwidths it states.
INSPECTOR_COLUMNS = ("process", "comm", "comm_rank", "n_ranks", "nnodes", "kind", "op", "sn", "msg_bytes",
                     "exec_ns", "start_ns", "end_ns", "timing", "peer", "algbw_gbps", "busbw_gbps")


@dataclass
class InspectorLog:
    """One NCCL Inspector output file (``NCCL_INSPECTOR_ENABLE=1``, JSON lines) decoded into columns
    (INSPECTOR_COLUMNS -> numpy arrays), and what reading it met, as counts: lines that are not JSON, records
    of the wrong shape, records of a format version it does not know, records with fields it does not know
    (their names, a few), records without kernel timestamps (not verbose: nothing to match arrivals on), lines
    too long to be records, and whether its last line was cut short."""

    path: str
    bytes: int
    # Taken by analyzers/run/log_ranks.py as it joins every log's rows (emptied there, so that a run's rows are
    # never held twice: bench/RESULTS.md, "NCCL Inspector logs of thousands of ranks"); ``records`` stays.
    columns: dict = field(default_factory=dict)
    records: int = 0
    processes: list[tuple[str, int]] = field(default_factory=list)    # (hostname, pid)
    comms: list[str] = field(default_factory=list)                    # header.id (the communicator's hash)
    comm_names: list[str | None] = field(default_factory=list)        # header.comm_name per comm (v4.2)
    ops: list[str] = field(default_factory=list)
    timing: list[str] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)            # format version -> records
    not_json: int = 0
    bad_shape: int = 0
    unknown_version: int = 0
    unknown_fields: int = 0
    unknown_names: list[str] = field(default_factory=list)
    no_timestamps: int = 0
    implausible_world: int = 0        # records of a communicator of more than meta.MAX_WORLD ranks, dropped
    far_times: int = 0                # records whose kernel times lie more than a day from the log's, dropped
    too_long: int = 0                 # lines longer than parsers/nccl/inspector.py's MAX_LINE, skipped
    inflate_cap: int = 0              # gzip data inflating past this many bytes (a bomb?): read up to it only
    truncated: bool = False


@dataclass
class NcclInputs:
    """Everything the transport verdict reads besides bandwidth: the parsed logs, the NCCL settings recorded
    elsewhere, and notes about the inputs (code, count, message) for the report's warnings; ``inspector``: the
    run's NCCL Inspector logs, whose collectives the cross-rank analysis matches where no trace is given."""

    logs: list[NcclLog] = field(default_factory=list)
    env: list[EnvSetting] = field(default_factory=list)
    notes: list[tuple[str, int, str]] = field(default_factory=list)
    inspector: list[InspectorLog] = field(default_factory=list)
