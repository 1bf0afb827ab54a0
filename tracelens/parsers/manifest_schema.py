"""The typed msgspec schema of a ``tracelens collect`` run directory's ``manifest.json`` (schema
``tracelens.manifest/1``, written by ``collectors/manifest.py``), and its reader.

Only the fields tracelens reads are declared; msgspec skips every other key inside the decoder. A clean
manifest is decoded in one typed call. One that the typed decoder refuses is read field by field (as the
trace decoder's per-event path does, :mod:`.kineto.repair`): a field of the wrong type is left out and
named (``world_size``, ``ranks[3].nccl_log``), the rest is kept. Nothing here opens a file.
"""

from __future__ import annotations

import functools
import typing
from typing import Annotated, ClassVar, Union

import msgspec

from .. import json_text
from ..json_text import not_utf8
from ..model.meta import MAX_WORLD

# Ranks and world sizes as a launcher gives them (torch's ranks are C ints).
Rank = Annotated[int, msgspec.Meta(ge=0, lt=2**31)]
WorldSize = Annotated[int, msgspec.Meta(ge=1, le=MAX_WORLD)]      # more: corrupt (meta.MAX_WORLD)
Cores = Annotated[int, msgspec.Meta(ge=1, lt=2**31)]


class RankEntry(msgspec.Struct, gc=False):
    """One rank's entry in ``ranks``. ``PATHS``: the fields that name a file of the run directory (relative
    to it); the reader keeps them only when they lead to a place inside it (:mod:`.rundir`)."""
    PATHS: ClassVar[tuple[str, ...]] = ("nccl_log", "trace", "export")
    rank: Union[Rank, None] = None
    env: Union[dict[str, str], None] = None
    nccl_log: Union[str, None] = None
    trace: Union[str, None] = None
    export: Union[str, None] = None
    host: Union[str, None] = None
    cpus: Union[Cores, None] = None         # the cores the rank's process could run on


class Manifest(msgspec.Struct, gc=False):
    """The manifest's fields that tracelens reads. ``schema`` tells a tracelens manifest from any other
    ``manifest.json`` (one without it is not ours, and is not read)."""
    schema: Union[str, None] = None
    world_size: Union[WorldSize, None] = None
    env: Union[dict[str, str], None] = None
    command: Union[list[str], None] = None
    argv: Union[list[str], None] = None
    ranks: Union[list[RankEntry], None] = None
    nccl_logs: Union[list[str], None] = None     # every NCCL log of the run (paths, like RankEntry.PATHS)


class Unusable(Exception):
    """The document as a whole cannot be read (not JSON, not UTF-8, nested too deep)."""


_DROP = object()
_FAILED = (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError)


@functools.lru_cache(maxsize=None)
def _decoder(typ) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(typ)


@functools.lru_cache(maxsize=None)
def _raw_twin(cls) -> type:
    """``cls`` with every field left undecoded (an empty Raw: absent), under the same JSON names."""
    fields = msgspec.structs.fields(cls)
    return msgspec.defstruct(f"_Raw{cls.__name__}", [(f.name, msgspec.Raw, msgspec.Raw()) for f in fields],
                             rename={f.name: f.encode_name for f in fields}, gc=False)


def decode(data: bytes) -> tuple[Manifest | None, list[tuple[str, str]]]:
    """The manifest in ``data``, and (field, why) for each field of the wrong type, left out. None when the
    document is JSON but not an object. Raises :class:`Unusable` when it is not JSON at all."""
    try:
        return _decoder(Manifest).decode(data), []
    except _FAILED as exc:
        # A field's value of the wrong type, or text that is not UTF-8: read field by field.
        if not isinstance(exc, msgspec.ValidationError) and not not_utf8(exc, data):
            raise Unusable(_why(exc)) from None
    wrong: list[tuple[str, str]] = []
    try:
        top = _decoder(_raw_twin(Manifest)).decode(data)
    except msgspec.ValidationError:
        return None, []
    except _FAILED as exc:
        raise Unusable(_why(exc)) from None
    return _fields(top, Manifest, "", wrong), wrong


def _fields(raw, cls, where: str, wrong: list):
    """An instance of ``cls`` from its raw twin ``raw``: each field decoded on its own."""
    kept = {}
    for f in msgspec.structs.fields(cls):
        text = getattr(raw, f.name)
        if text:
            value = _value(bytes(text), f.type, f"{where}.{f.encode_name}" if where else f.encode_name, wrong)
            if value is not _DROP:
                kept[f.name] = value
    return cls(**kept)


def _value(text: bytes, typ, where: str, wrong: list):
    """``text`` decoded as ``typ``; where it cannot be, the parts that can (a struct's other fields, a list's
    other structs, a mapping's other keys), or _DROP with the field noted in ``wrong``. A list of words (a
    command line) is kept whole or not at all: without one word, the next would take its place."""
    try:
        return _decoder(typ).decode(text)
    except _FAILED as exc:
        error = exc
    inner = [a for a in typing.get_args(typ) if a is not type(None)] if typing.get_origin(typ) is Union else [typ]
    if len(inner) == 1:
        kind, args = typing.get_origin(inner[0]), typing.get_args(inner[0])
        try:
            if _is_struct(inner[0]):
                return _fields(_decoder(_raw_twin(inner[0])).decode(text), inner[0], where, wrong)
            if kind is list and _is_struct(args[0]):
                items = [_value(bytes(t), args[0], f"{where}[{i}]", wrong)
                         for i, t in enumerate(_decoder(list[msgspec.Raw]).decode(text))]
                return [v for v in items if v is not _DROP]
            if kind is dict:
                pairs = {k: _value(bytes(t), args[1], f"{where}.{k}", wrong)
                         for k, t in _decoder(dict[args[0], msgspec.Raw]).decode(text).items()}
                return {k: v for k, v in pairs.items() if v is not _DROP}
        except _FAILED:
            pass
    wrong.append((where, _why(error)))
    return _DROP


def _is_struct(typ) -> bool:
    return isinstance(typ, type) and issubclass(typ, msgspec.Struct)


def _why(exc: BaseException) -> str:
    """A decoder's message without the path it appends (the caller names the field)."""
    if isinstance(exc, RecursionError):
        return "nested too deep"
    text = json_text.why(exc).split(" - at `$", 1)[0]
    return text[:1].lower() + text[1:] if text[1:2].islower() else text
