"""The NVTX payload format helpers on hand-made schemas and blobs."""

from __future__ import annotations

import struct

import numpy as np

from tracelens.parsers.nsys import nvtx_payload as nvp


def test_missing_offsets_follow_natural_alignment():
    # int32 @0, then a uint64 with no offset: C aligns it to 8 (struct.calcsize("<i4xQ") = 16), then an
    # int32 after it @16.
    lay = nvp.layout_of([(0, 5, "a", None), (1, 18, "b", None), (2, 5, "c", None)], None)
    assert lay == nvp.PayloadLayout(20, (("a", 0, 4, True), ("b", 8, 8, False), ("c", 16, 4, True)))


def test_layouts_a_fixed_struct_cannot_hold_are_refused():
    assert nvp.layout_of([(0, 19, "float", 0)], 4) is None          # a float is no integer field
    assert nvp.layout_of([(0, 18, "id", 0), (1, 5, "n", 8)], 8) is None   # field past the payload size
    assert nvp.layout_of([(0, nvp.SCHEMA_ID_STATIC_START + 14, "op", 0)], 4).fields == (("op", 0, 4, True),)


def test_headers_and_fields_of_blobs_of_different_lengths():
    blobs = [struct.pack("<QQQQqi", 1, 7, 12, 32, -5, 9), b"short", struct.pack("<QQQQqi", 2, 7, 12, 32, 2**40, -1)]
    buf, starts, lengths = nvp.blob_table(blobs)
    head = nvp.headers(buf, starts, lengths)
    assert head.tolist() == [[1, 7, 12], [-1, -1, -1], [2, 7, 12]]
    lay = nvp.PayloadLayout(12, (("x", 0, 8, True), ("y", 8, 4, True)))
    got = nvp.read_fields(buf, starts[[0, 2]], lay, {"x": "x", "y": "y"})
    assert got["x"].tolist() == [-5, 2**40] and got["y"].tolist() == [9, -1]


def test_unsigned_64_bit_values_keep_their_bits():
    buf = np.frombuffer(struct.pack("<Q", 2**64 - 2), np.uint8)
    assert nvp.gather(buf, np.array([0]), 8, False).view(np.uint64).tolist() == [2**64 - 2]


def test_json_entries_are_parsed_once_per_text():
    texts = ['{"Rank": 3}', '{"Rank": 3}', "not json", '{"outer": {"Rank": 4}}', "[1]"]
    assert nvp.json_fields(texts, {"Rank": "rank"}) == [{"rank": 3}, {"rank": 3}, None, {"rank": 4}, None]
