"""A big Kineto trace's ``traceEvents`` array cut into runs of whole events, found by scanning the bytes.

:mod:`.slices` decodes such a trace a slice at a time; this module says where the slices are, without
decoding anything and without holding more than a window of the file: numpy over ``WINDOW`` bytes at a
time finds the quotes that open or close strings (a quote after an odd run of backslashes does not) and the
brackets outside strings, whose running sum is the depth (bench/RESULTS.md, "Slice decode"). An
event ends where a bracket closes back to the depth of the array's items; every ``every`` events the comma
after one is a cut. Whatever lies around the array (the keys before and after it, in any order) becomes the
header: the document with the array replaced by a marker that no file holds (a random string), so that the
header's decode confirms that the array cut is the one a decode of the whole file would read (duplicate or
escaped keys included).

The scan trusts the JSON to be valid; the decoder checks it. Given that the first slice starts just after
the array's ``[``, a slice that decodes as a non-empty list ends just before a comma between items of the
array (a cut inside a string or a nested value would leave it unterminated), so slices that all decode,
and a header that decodes with the marker in the array's place, are exactly the whole file's document.
Anything the scan cannot place (no array, no end, no comma where one must be) answers None: the whole-file
decode reads the file and says what is wrong with it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

WINDOW = 4 << 20            # bytes scanned per numpy pass: a few tens of MB of scratch arrays at most
_LOOK = 64 << 10            # bytes past a window that a name, colon or comma after it is looked for in
_KEY = b'"traceEvents"'
_AFTER_KEY = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\[')
_COMMA = re.compile(rb"[ \t\n\r]*,")
_WS = re.compile(rb"[ \t\n\r]*")
_QUOTE, _BACKSLASH = 0x22, 0x5C


@dataclass
class Split:
    """Where the events are: ``slices`` are [start, stop) byte ranges of the file, each a run of whole
    events (no brackets around them); ``header`` is the document with ``marker`` in the array's place,
    None when the document is the bare array."""
    slices: list[tuple[int, int]]
    header: bytes | None
    marker: bytes

    def text(self, buf, index: int) -> bytearray:
        """Slice ``index`` as a JSON array: the only copy of its bytes that is made."""
        start, stop = self.slices[index]
        out = bytearray(stop - start + 2)
        out[0], out[-1] = ord("["), ord("]")
        out[1:-1] = memoryview(buf)[start:stop]
        return out


class _State:
    """The scan between windows: depth outside strings, inside a string or not, whether the next byte is
    escaped (a window may end inside a run of backslashes)."""

    def __init__(self, depth: int) -> None:
        self.depth, self.in_string, self.escaped = depth, False, False


def split(buf, every: int, release: Callable[[int], None] | None = None,
          fill: Callable[[int], None] | None = None) -> Split | None:
    """The slices of at most ``every`` events of the trace in ``buf`` (bytes or a mapping), or None.
    ``release(offset)`` is told, as the scan moves on, that the bytes before ``offset`` are not needed again
    by the scan (a mapping hands their pages back); ``fill(offset)`` is asked for the bytes before
    ``offset`` before they are read (a mapping that a stream is inflated into)."""
    fill = fill or (lambda offset: None)
    fill(_LOOK)
    first = _WS.match(buf).end()
    if first >= len(buf):
        return None
    if buf[first] == ord("["):
        start, depth = first, 1
    elif buf[first] == ord("{"):
        start = _find_array(buf, first, fill)
        if start is None:
            return None
        depth = 2
    else:
        return None
    head = bytes(buf[:start])
    found = _cut(buf, start, depth, every, release or (lambda offset: None), fill)
    if found is None:
        return None
    slices, end = found
    fill(len(buf))
    tail = bytes(buf[end:])
    marker = b'["tracelens:' + os.urandom(8).hex().encode() + b'"]'
    if depth == 1:
        return Split(slices, None, marker) if not tail.strip(b" \t\n\r") else None
    return Split(slices, head + marker + tail, marker)


def events_start(buf) -> int | None:
    """Offset of the ``[`` that opens a trace's events in ``buf`` (the head of its JSON): the document itself
    when it is a bare array, else the value of its top-level ``traceEvents`` key, found by the scan
    :func:`split` uses; None when ``buf`` does not reach it (or holds no such array). ``tracelens annotate``
    inserts its events just after it, and copies everything else as it is."""
    first = _WS.match(buf).end()
    if first >= len(buf):
        return None
    if buf[first] == ord("["):
        return first
    if buf[first] == ord("{"):
        return _find_array(buf, first, lambda offset: None)
    return None


def _find_array(buf, first: int, fill) -> int | None:
    """Offset of the ``[`` opening the value of the top-level ``traceEvents`` key, scanning from the
    document's ``{`` at ``first``."""
    state = _State(0)
    lo = first
    while lo < len(buf):
        hi = min(lo + WINDOW, len(buf))
        fill(hi + _LOOK)
        win = _scan(buf, lo, hi, state)
        at = buf.find(_KEY, lo, hi + len(_KEY) - 1)         # the names that begin in this window
        while at >= 0:
            opens = (int(np.count_nonzero(win.quotes[:at - lo])) + win.in_string) % 2 == 0
            k = int(np.searchsorted(win.offsets, at)) - 1
            if opens and (int(win.after[k]) if k >= 0 else win.depth) == 1:
                m = _AFTER_KEY.match(buf, at)
                if m is not None:
                    return m.end() - 1
            at = buf.find(_KEY, at + 1, hi + len(_KEY) - 1)
        lo = hi
    return None


def _cut(buf, start: int, depth: int, every: int, release, fill) -> tuple[list[tuple[int, int]], int] | None:
    """(slices, offset past the array's ``]``) of the array whose ``[`` is at ``start`` and whose items sit
    at ``depth``."""
    state = _State(depth)
    slices, begin, seen = [], start + 1, 0
    lo = start + 1
    while lo < len(buf):
        hi = min(lo + WINDOW, len(buf))
        fill(hi + _LOOK)
        win = _scan(buf, lo, hi, state)
        below = np.flatnonzero(win.closing & (win.after < depth))
        last = int(below[0]) if below.size else len(win.offsets)
        ends = win.offsets[:last][win.closing[:last] & (win.after[:last] == depth)]
        picked = ends[(seen + np.arange(1, ends.size + 1)) % every == 0]
        seen += ends.size
        for e in picked.tolist():
            m = _COMMA.match(buf, e + 1)
            if m is not None:
                slices.append((begin, m.end() - 1))
                begin = m.end()
                continue
            following = _WS.match(buf, e + 1).end()
            if buf[following:following + 1] != b"]":
                return None     # neither a comma nor the array's end after an event
        if below.size:
            end = int(win.offsets[last])
            if buf[end] != ord("]"):
                return None
            slices.append((begin, end))
            return slices, end + 1
        release(hi)
        lo = hi
    return None                 # truncated: the array never closes


@dataclass
class _Window:
    """One window's brackets outside strings: their offsets in the file, whether each closes, the depth
    after each; the mask of its string quotes, and the state at its start (inside a string, depth)."""
    offsets: np.ndarray
    closing: np.ndarray
    after: np.ndarray
    quotes: np.ndarray
    in_string: int
    depth: int


def _scan(buf, lo: int, hi: int, state: _State) -> _Window:
    """``buf[lo:hi]`` scanned from ``state``, which is advanced past it."""
    w = np.frombuffer(buf, np.uint8, hi - lo, lo)
    quotes = w == _QUOTE
    if state.escaped or buf.find(b"\\", lo, hi) >= 0:
        escaped, state.escaped = _escaped(w, state.escaped)
        quotes[escaped] = False
    folded = w | 0x20           # '[' and ']' fold onto '{' and '}'
    brackets = np.flatnonzero((folded == 0x7B) | (folded == 0x7D))
    parity, depth = int(state.in_string), state.depth
    # Inside a string or not at each bracket: the parity of the quotes before it, one xor per run of bytes
    # between brackets (a bracket is never a quote; one xor per run beats counting the quotes here).
    runs = np.bitwise_xor.reduceat(quotes.view(np.uint8), np.concatenate(([0], brackets)))
    brackets = brackets[(np.bitwise_xor.accumulate(runs[:-1]) ^ parity) == 0]
    closing = (w[brackets] & 2) == 0         # ']' 0x5D and '}' 0x7D have bit 1 clear, '[' and '{' set
    after = np.cumsum(1 - 2 * closing.astype(np.int64)) + depth
    if after.size:
        state.depth = int(after[-1])
    state.in_string = bool((int(np.count_nonzero(quotes)) + parity) % 2)
    return _Window(brackets + lo, closing, after, quotes, parity, depth)


def _escaped(w: np.ndarray, carried: bool) -> tuple[np.ndarray, bool]:
    """Offsets in ``w`` of the bytes a backslash escapes, and whether the byte after ``w`` is one.
    ``carried``: the first byte is escaped by a backslash that ended the previous window."""
    slashes = np.flatnonzero(w == _BACKSLASH)
    if not slashes.size:
        return np.array([0] if carried else [], np.int64), False
    index = np.arange(slashes.size)
    run_start = np.ones(slashes.size, bool)
    run_start[1:] = np.diff(slashes) != 1
    first = np.maximum.accumulate(np.where(run_start, index, 0))
    # In a run of backslashes every other one escapes the next byte, starting with the first, unless the
    # first is itself escaped from the previous window.
    shift = carried & (slashes[first] == 0)
    escapes = slashes[((index - first + shift) % 2) == 0] + 1
    if carried:
        escapes = np.concatenate(([0], escapes))
    beyond = bool(escapes.size) and int(escapes[-1]) == w.size
    return (escapes[:-1] if beyond else escapes), beyond
