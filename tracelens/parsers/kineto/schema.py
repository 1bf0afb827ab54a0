"""Kineto traces, stage 2 of 4: the typed msgspec schema of a Chrome-trace document.

Only the fields tracelens reads are declared; msgspec skips every other key inside the decoder, and the
phases tracelens does not read decode to empty structs. The bounds on numbers make a value that no int64
column could hold fail in the decoder, where the per-event path (:mod:`.repair`) handles it.
Structs are ``gc=False``: 10^5 decoded events are never tracked by the cyclic garbage collector.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Union

import msgspec

# Bounded so that a value no int64 column can hold fails in the decoder (and is handled per event, see
# decode) instead of overflowing later; the bounds cost nothing measurable in the typed pass.
Int64 = Annotated[int, msgspec.Meta(ge=-2**63, le=2**63 - 1)]
Float64 = Annotated[float, msgspec.Meta(ge=-2.0**63, lt=2.0**63)]
Num = Union[Int64, Float64, None]
IntOrStr = Union[Int64, str, None]
# Times in µs: within ±2**53 µs, times 1000, they still fit int64 ns.
Time = Union[Annotated[int, msgspec.Meta(ge=-2**53, le=2**53)], Annotated[float, msgspec.Meta(ge=-2.0**53, le=2.0**53)]]


NO_RAW = msgspec.Raw()


class Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` keys tracelens reads; every other key is skipped inside the decoder.

    Id-like fields default to -1 (the model's "none") so whole columns convert to int64 in one call.
    """
    correlation: IntOrStr = -1
    external_id: IntOrStr = msgspec.field(default=-1, name="External id")
    external_id_legacy: IntOrStr = msgspec.field(default=-1, name="external id")
    device: IntOrStr = -1
    stream: IntOrStr = -1
    bytes: Num = -1
    from_device: IntOrStr = msgspec.field(default=None, name="fromDevice")
    to_device: IntOrStr = msgspec.field(default=None, name="toDevice")
    name: Union[str, int, None] = None          # metadata events (thread_name, process_name)
    labels: Union[str, None] = None             # process_labels
    collective: Union[str, None] = msgspec.field(default=None, name="Collective name")
    in_nelems: Num = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Num = msgspec.field(default=None, name="Out msg nelems")
    in_size: Num = msgspec.field(default=None, name="In msg size")
    out_size: Num = msgspec.field(default=None, name="Out msg size")
    dtype: Union[str, None] = None
    group_size: Num = msgspec.field(default=None, name="Group size")
    pg_name: IntOrStr = msgspec.field(default=None, name="Process Group Name")
    pg_id: IntOrStr = msgspec.field(default=None, name="Process Group ID")
    pg_desc: Union[str, None] = msgspec.field(default=None, name="Process Group Description")
    seq: IntOrStr = msgspec.field(default=None, name="Seq")
    # Kept undecoded (Raw cannot be in a Union; an empty Raw means absent) and read only for comm scopes.
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    pg_ranks: msgspec.Raw = msgspec.field(default=NO_RAW, name="Process Group Ranks")
    # A kernel's launch configuration, kept undecoded: only compared (the overlap tax's kernel identity).
    grid: msgspec.Raw = NO_RAW
    block: msgspec.Raw = NO_RAW


_NO_ARGS = Args()


class Event(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event (``"ph": "X"``): every CPU op, runtime call and device activity.

    ``ts`` and ``dur`` are required numbers: an event without its time cannot be placed, and reading a
    missing one as 0 would put it at the epoch (it is skipped and counted instead, see :func:`decode`).
    """
    ts: Time
    dur: Time
    cat: Union[str, None] = None
    name: Union[str, int, float, None] = None
    pid: IntOrStr = None
    tid: IntOrStr = None
    args: Args = _NO_ARGS


class MetaEvent(msgspec.Struct, tag_field="ph", tag="M", gc=False):
    """Metadata (``"ph": "M"``): thread and process names. ``cat``, kept undecoded (no value of it fails the
    decode): ``tracelens annotate`` marks the names of the tracks it adds with its category."""
    name: Union[str, int, float, None] = None
    pid: IntOrStr = None
    tid: IntOrStr = None
    args: Args = _NO_ARGS
    cat: msgspec.Raw = NO_RAW


# Every other Chrome-trace phase (flows, instants, counters, async, ...) decodes to an empty struct: a
# third of a Kineto trace is ac2g flow and instant events, and none of their fields are needed.
_SKIPPED_PHASES = tuple("BEiICbnestfPONDVvRc()")
_Skipped = tuple(msgspec.defstruct(f"Skipped_{ord(p)}", [], tag_field="ph", tag=p, gc=False)
                 for p in _SKIPPED_PHASES)
AnyEvent = Union[(Event, MetaEvent) + _Skipped]
KNOWN_PHASES = frozenset(("X", "M") + _SKIPPED_PHASES)


class DistInfo(msgspec.Struct, gc=False):
    rank: IntOrStr = None
    world_size: IntOrStr = None
    backend: Union[str, None] = None
    nccl_version: Union[str, None] = None
    pg_config: Union[list, None] = None


class DeviceProp(msgspec.Struct, gc=False):
    id: IntOrStr = None
    name: Union[str, None] = None


class Document(msgspec.Struct, gc=False):
    traceEvents: Union[list[AnyEvent], None] = None
    distributedInfo: Union[DistInfo, None] = None
    deviceProperties: Union[list[DeviceProp], None] = None
    baseTimeNanoseconds: Union[Int64, None] = None
    INFO: Union[list, None] = None
    host_name: Union[str, int, None] = None


DECODER = msgspec.json.Decoder(Union[Document, list[AnyEvent]])


class TimesOnly(msgspec.Struct, gc=False):
    ts: Union[Decimal, None] = None
    dur: Union[Decimal, None] = None


class TimesDoc(msgspec.Struct, gc=False):
    traceEvents: list[TimesOnly] = []
