"""The byte scan that cuts a Kineto trace's events array into slices (parsers/kineto/split.py), on hostile
JSON: every slice decodes, the slices together are the array, the header is the rest of the document."""

from __future__ import annotations

import json
from contextlib import contextmanager

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelens.parsers.kineto import split as kineto_split

# Text that a naive cut would trip on: brackets, braces, commas and quotes inside strings, backslashes
# (escaped quotes, a backslash right before a closing quote), the key's own name, unicode beyond ASCII.
_HOSTILE = st.lists(st.sampled_from(list('"\\[]{},: \n\tab') + ["é", "€", "\u2028", "😀", "traceEvents"]),
                    max_size=12).map("".join)
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), _HOSTILE)
_VALUE = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(_HOSTILE, inner, max_size=4)),
                      max_leaves=12)
_EVENT = st.one_of(st.dictionaries(_HOSTILE, _VALUE, max_size=5),
                   st.fixed_dictionaries({"ph": st.just("X"), "name": _HOSTILE, "args": _VALUE}))
# Item and key separators: any JSON whitespace around the comma and the colon.
_WS = st.text(st.sampled_from(" \t\n\r"), max_size=3)
_SEPARATORS = st.tuples(st.builds(lambda a, b: a + "," + b, _WS, _WS), st.builds(lambda a, b: a + ":" + b, _WS, _WS))


@st.composite
def documents(draw):
    events = draw(st.lists(st.one_of(_EVENT, _EVENT, _SCALAR), max_size=12))
    if draw(st.booleans()):
        return events
    before = draw(st.dictionaries(_HOSTILE.filter(lambda k: k != "traceEvents"), _VALUE, max_size=3))
    after = draw(st.dictionaries(_HOSTILE.filter(lambda k: k != "traceEvents"), _VALUE, max_size=3))
    return {**before, "traceEvents": events, **{k: v for k, v in after.items() if k not in before}}


def _encode(draw, doc) -> bytes:
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 0, 2])),
                      separators=draw(_SEPARATORS))
    return (draw(_WS) + text + draw(_WS)).encode()


@contextmanager
def _window(size: int):
    """Windows of a few bytes, so that every state of the scan crosses a window's edge somewhere."""
    saved, kineto_split.WINDOW = kineto_split.WINDOW, size
    try:
        yield
    finally:
        kineto_split.WINDOW = saved


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(documents(), st.data(), st.integers(1, 4), st.integers(1, 48))
def test_slices_are_the_array_and_the_header_the_rest(doc, data, every, window):
    raw = _encode(data.draw, doc)
    with _window(window):
        parts = kineto_split.split(raw, every)
    assert parts is not None
    events = []
    for i in range(len(parts.slices)):
        events += json.loads(bytes(parts.text(raw, i)))
    assert events == (doc if isinstance(doc, list) else doc["traceEvents"])
    if isinstance(doc, list):
        assert parts.header is None
        return
    assert parts.header.count(parts.marker) == 1
    header = json.loads(parts.header)
    assert header.pop("traceEvents") == json.loads(parts.marker)
    assert header == {k: v for k, v in doc.items() if k != "traceEvents"}


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(_EVENT, min_size=1, max_size=12), st.integers(1, 4), st.integers(1, 48))
def test_each_slice_holds_every_events_but_the_last(events, every, window):
    raw = json.dumps({"traceEvents": events}).encode()
    with _window(window):
        parts = kineto_split.split(raw, every)
    counts = [len(json.loads(bytes(parts.text(raw, i)))) for i in range(len(parts.slices))]
    # Hand count: n events in slices of ``every``, the remainder (if any) in the last.
    assert counts[:-1] == [every] * (len(counts) - 1) and 1 <= counts[-1] <= every
    assert sum(counts) == len(events)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(documents(), st.data(), st.integers(1, 48))
def test_a_truncated_document_is_never_cut_as_if_whole(doc, data, window):
    raw = _encode(data.draw, doc)
    short = raw[:data.draw(st.integers(0, len(raw.rstrip()) - 1))]
    with _window(window):
        parts = kineto_split.split(short, 2)
    if parts is None:
        return
    # The scan may place the array when the cut falls after it; then the header (the part cut short) must
    # fail to decode, which sends the file to the whole-file decode and its error.
    for i in range(len(parts.slices)):
        msgspec.json.decode(parts.text(short, i))
    assert parts.header is not None
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(parts.header)


@pytest.mark.parametrize("raw", [b"", b"  ", b"null", b'"traceEvents"', b'{"traceEvents": null}',
                                 b'{"other": [1, 2]}', b'{"traceEvents": [{"a": 1}, {"b": 2}',
                                 b'{"a": "\\"traceEvents\\": [1]"}', b'{"b": {"traceEvents": [{}]}}'])
def test_no_array_to_cut(raw):
    assert kineto_split.split(raw, 1) is None


@pytest.mark.parametrize("raw", [
    b'{"a": "\\"traceEvents\\": [9]", "b": {"traceEvents": [8]}, "traceEvents": [{"x": 1}]}',
    b'{"a\\"traceEvents": [9], "traceEvents": [{"x": 1}]}',      # the quote before the name is escaped
    b'{"a": ["traceEvents", [9]], "traceEvents": [{"x": 1}]}'])
def test_the_key_inside_a_string_or_a_nested_value_is_not_the_array(raw):
    parts = kineto_split.split(raw, 1)
    assert [json.loads(bytes(parts.text(raw, i))) for i in range(len(parts.slices))] == [[{"x": 1}]]


@pytest.mark.parametrize("carried", [False, True])
@pytest.mark.parametrize("text", [b'ab', b'\\"', b'\\\\"', b'\\\\\\"x', b'a\\', b'\\\\', b'\\\\\\'])
def test_escaped_bytes(text, carried):
    # Against a byte-by-byte reading: a backslash that is not itself escaped escapes the next byte.
    want, escaped = [], carried
    for i, byte in enumerate(text):
        if escaped:
            want.append(i)
            escaped = False
        elif byte == ord("\\"):
            escaped = True
    got, beyond = kineto_split._escaped(np.frombuffer(text, np.uint8), carried)
    assert got.tolist() == want and beyond == escaped


@settings(max_examples=100, deadline=None)
@given(documents(), st.data(), st.integers(1, 48))
def test_events_start_is_where_an_event_can_be_inserted(doc, data, window):
    # tracelens annotate inserts its events just after this bracket, having read only a head of the trace:
    # every head answers the same offset or None (never another), and the whole document, with one event
    # inserted there, reads as the document with that event first.
    raw = _encode(data.draw, doc)
    with _window(window):
        at = kineto_split.events_start(raw)
        cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=8))
        heads = {kineto_split.events_start(raw[:n]) for n in cuts}
    assert at is not None and heads <= {None, at} and raw[at:at + 1] == b"["
    empty = raw[at + 1:].lstrip()[:1] == b"]"
    inserted = json.loads(raw[:at + 1] + (b'{"ok": 1}' if empty else b'{"ok": 1},') + raw[at + 1:])
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    assert (inserted if isinstance(doc, list) else inserted["traceEvents"]) == [{"ok": 1}, *events]
    if isinstance(doc, dict):
        assert {k: v for k, v in inserted.items() if k != "traceEvents"} == {
            k: v for k, v in doc.items() if k != "traceEvents"}
