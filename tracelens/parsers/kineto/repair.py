"""Kineto traces, stage 2 of 4, the exception: a file in which some value has the wrong type.

The whole-file typed decode (:func:`.decode.decode`) refuses such a file; this path reads it event by
event instead, so that one bad event costs only itself. Values that are numbers of the wrong JSON type (a
number written as text, a whole number written as a float) are repaired and counted, events that cannot
be read are skipped and counted (:class:`DecodeIssues`, the report's ``coerced-values``,
``malformed-events`` and ``malformed-header`` warnings). Clean files never run any of this.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Union

import msgspec

from ...errors import InputError
from ...json_text import UNREADABLE, not_utf8
from .schema import NO_RAW, KNOWN_PHASES, AnyEvent, DeviceProp, DistInfo, Document, Int64


class DecodeIssues:
    """Values repaired and events skipped while decoding one file, per field (a dotted path such as
    ``args.bytes``), each with its count and the index in ``traceEvents`` of its first event."""

    def __init__(self) -> None:
        self.skipped: dict[str, list[int]] = {}     # field -> [events, first index]
        self.coerced: dict[str, list[int]] = {}     # field -> [values, first index]
        self.header: list[str] = []                 # document-level fields ignored, each with what it held
        self.header_read: list[str] = []            # document-level fields read although of another type
        self.bad_utf8 = 0                           # bytes of invalid UTF-8 replaced by U+FFFD

    def restart(self) -> "DecodeIssues":
        """Forget what a pass that did not finish noted (the invalid-UTF-8 count stays)."""
        self.skipped.clear()
        self.coerced.clear()
        self.header.clear()
        self.header_read.clear()
        return self

    @staticmethod
    def _note(table: dict, field: str, index: int) -> None:
        entry = table.get(field)
        if entry is None:
            table[field] = [1, index]
        else:
            entry[0] += 1

    def to_warnings(self, log) -> None:
        def fields(table):
            return ", ".join(f"{f} ({n}, first traceEvents[{i}])" if i >= 0 else f"{f} ({n})"
                             for f, (n, i) in table.items())
        if self.skipped:
            n = sum(c for c, _ in self.skipped.values())
            log.add("malformed-events", f"skipped {n} event{'s' if n > 1 else ''} with a field of the wrong type "
                    f"or missing: {fields(self.skipped)}", n)
        if self.coerced:
            n = sum(c for c, _ in self.coerced.values())
            log.add("coerced-values", f"read {n} value{'s' if n > 1 else ''} written with another type (a number "
                    f"as text, a whole number as a float): {fields(self.coerced)}", n)
        if self.bad_utf8:
            log.add("invalid-utf8", "text that is not UTF-8 was read with each invalid byte sequence replaced "
                    "by U+FFFD", self.bad_utf8)
        if self.header or self.header_read:
            # Not events: the document's own fields, each said with what was used in its place.
            log.add("malformed-header", "document fields of the wrong type: " + "; ".join(self.header_read + self.header),
                    len(self.header) + len(self.header_read))


class _RawDocument(msgspec.Struct, gc=False):
    """The document with every field we read left undecoded (the per-event path, see :func:`decode`)."""
    traceEvents: msgspec.Raw = NO_RAW
    distributedInfo: msgspec.Raw = NO_RAW
    deviceProperties: msgspec.Raw = NO_RAW
    baseTimeNanoseconds: msgspec.Raw = NO_RAW
    INFO: msgspec.Raw = NO_RAW
    host_name: msgspec.Raw = NO_RAW


# What a report uses in place of a document field it cannot read.
_INSTEAD = {"baseTimeNanoseconds": "event times read without a base (0)",
            "distributedInfo": "the rank comes from the file name, else the input order",
            "deviceProperties": "no device names", "INFO": "left out", "host_name": "no host name"}
RAW_DOC = msgspec.json.Decoder(Union[_RawDocument, list[msgspec.Raw]])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
EVENTS = msgspec.json.Decoder(list[AnyEvent])
_EVENT = msgspec.json.Decoder(AnyEvent)
HEADER = {"distributedInfo": msgspec.json.Decoder(Union[DistInfo, None]),
          "deviceProperties": msgspec.json.Decoder(Union[list[DeviceProp], None]),
          "baseTimeNanoseconds": msgspec.json.Decoder(Union[Int64, None]),
          "INFO": msgspec.json.Decoder(Union[list, None]),
          "host_name": msgspec.json.Decoder(Union[str, int, None])}
# Floats stay their written text (a Raw), so an event re-encoded after a repair keeps every digit.
_UNTYPED = msgspec.json.Decoder(float_hook=lambda text: msgspec.Raw(text.encode()))
_CHUNK = 2048            # events decoded per typed call on the per-event path
_ERROR_AT = re.compile(r" - at `\$(.*)`$")
_PATH_PART = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")
_MISSING = re.compile(r"missing required field `([^`]+)`")
_NUMBER_TEXT = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_INT64 = Decimal(2**63)


def decode_per_event(raw: bytes, path: str, issues: DecodeIssues) -> tuple[Document, list]:
    try:
        top = RAW_DOC.decode(raw)
    except msgspec.ValidationError:
        raise InputError("not a PyTorch profiler trace (no 'traceEvents' list)", path=path) from None
    except UNREADABLE as exc:
        if not_utf8(exc, raw):
            raise                       # the caller reads the text again with the bad bytes replaced
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    doc = Document()
    if isinstance(top, list):
        pieces = top
    else:
        if not top.traceEvents:
            return doc, []       # decode() reports the missing list
        try:
            pieces = _RAW_LIST.decode(top.traceEvents)
        except msgspec.ValidationError:
            raise InputError("not a PyTorch profiler trace (no 'traceEvents' list)", path=path) from None
        for name, decoder in HEADER.items():
            text = getattr(top, name)
            if text:
                value = _decode_repaired(text, decoder, name, -1, issues, header=True)
                setattr(doc, name, value)
    events, kept = [], []
    for at in range(0, len(pieces), _CHUNK):
        chunk = pieces[at:at + _CHUNK]
        try:
            events += EVENTS.decode(b"[" + b",".join(chunk) + b"]")
            kept += chunk
            continue
        except msgspec.ValidationError:
            pass
        for k, piece in enumerate(chunk):
            try:
                events.append(_EVENT.decode(piece))
                kept.append(piece)
                continue
            except msgspec.ValidationError as exc:
                error = str(exc)
            event = _decode_event(piece, error, at + k, issues)
            if event is not None:
                events.append(event[0])
                kept.append(event[1])
    doc.traceEvents = events
    return doc, kept


def _decode_event(piece, error: str, index: int, issues: DecodeIssues):
    """(event, its JSON text) for an event the typed decoder refused with ``error``, repaired where the value
    is a number of the wrong JSON type; None when it is skipped. Unknown phases are not ours to read: skipped
    quietly."""
    try:
        obj = _UNTYPED.decode(piece)
    except msgspec.ValidationError:         # a number beyond float range (1e400)
        parts, missing = _error_field(error)
        DecodeIssues._note(issues.skipped, ".".join(map(str, parts)) or "event", index)
        return None
    if not isinstance(obj, dict):
        DecodeIssues._note(issues.skipped, "event (not an object)", index)
        return None
    ph = obj.get("ph")
    if isinstance(ph, str) and ph not in KNOWN_PHASES:
        return None
    return _decode_repaired(piece, _EVENT, "", index, issues, obj=obj, with_text=True, error=error)


def _decode_repaired(piece, decoder, prefix: str, index: int, issues: DecodeIssues, header: bool = False,
                     obj=None, with_text: bool = False, error: str | None = None):
    """Decode ``piece`` typed; while the decoder names a field whose value is recoverable (a number
    written as text, a whole number written as a float), replace it by that number and try again.
    Returns the value (with its repaired JSON text when ``with_text``), or None when it cannot be read.
    ``error``: the typed decoder's message, when the caller has already tried."""
    if error is None:
        try:
            value = decoder.decode(piece)
            return (value, piece) if with_text else value
        except msgspec.ValidationError as exc:
            error = str(exc)
    if obj is None:
        try:
            obj = _UNTYPED.decode(piece)
        except msgspec.ValidationError:     # a number beyond float range
            obj = None
    repaired: list[str] = []
    while True:
        parts, missing = _error_field(error)
        field = ".".join(str(p) for p in ([prefix] if prefix else []) + parts + ([missing] if missing else []))
        holder, key = _locate(obj, parts)
        new = None if missing or holder is None or field in repaired else _recovered(holder[key])
        if new is None and header and not parts and not missing and not repaired:
            whole = _recovered(obj)             # the field itself a number of another type: "1767225600000000000"
            if whole is not None:
                try:
                    value = decoder.decode(bytes(whole))
                except msgspec.ValidationError:
                    pass
                else:
                    issues.header_read.append(f"{prefix} {_shown(piece)} read as the number {value}")
                    return value
        if new is None:
            if header:
                top = (field or prefix).split(".")[0]
                issues.header.append(f"{field or prefix} {_shown(piece)} ignored: {_INSTEAD.get(top, 'left out')}")
            else:
                DecodeIssues._note(issues.skipped, field or "event", index)
            return None
        holder[key] = new
        repaired.append(field)
        text = msgspec.json.encode(obj)
        try:
            value = decoder.decode(text)
        except msgspec.ValidationError as exc:
            error = str(exc)
            continue
        for f in repaired:
            if header:
                issues.header_read.append(f"{f} read as a number")
            else:
                DecodeIssues._note(issues.coerced, f, index)
        return (value, text) if with_text else value


def _shown(piece) -> str:
    """A document field's JSON text as a warning quotes it: at most 40 characters."""
    text = bytes(piece).decode("utf-8", "replace")
    return text if len(text) <= 40 else text[:39] + "…"


def _error_field(message: str) -> tuple[list, str | None]:
    """The path (keys and list indexes) a msgspec ValidationError points at, and the name of a missing
    required field."""
    at = _ERROR_AT.search(message)
    parts = [int(i) if i else k for k, i in _PATH_PART.findall(at.group(1))] if at else []
    missing = _MISSING.search(message)
    return parts, missing.group(1) if missing else None


def _locate(obj, parts: list):
    """(container, key) of the value at ``parts`` inside ``obj``; (None, None) when the path is not there."""
    if not parts:
        return None, None
    for p in parts[:-1]:
        try:
            obj = obj[p]
        except (KeyError, IndexError, TypeError):
            return None, None
    last = parts[-1]
    if isinstance(obj, dict) and last in obj or isinstance(obj, list) and isinstance(last, int) and last < len(obj):
        return obj, last
    return None, None


def _recovered(value):
    """The number ``value`` stands for as JSON text (a Raw), or None: a finite number written as a string
    (``"123.5"``), or a float with no fraction (``7.0``, read where an integer is expected)."""
    if isinstance(value, str):
        text = value.strip()
        if _NUMBER_TEXT.fullmatch(text) and abs(Decimal(text)) < _INT64:
            return msgspec.Raw(text.encode())
        return None
    if isinstance(value, msgspec.Raw):      # a float, as written (see _UNTYPED)
        number = Decimal(bytes(value).decode())
        if number == number.to_integral_value() and abs(number) < _INT64:
            return msgspec.Raw(str(int(number)).encode())
    return None

