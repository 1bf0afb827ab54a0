"""Text that is not UTF-8 told apart from text that is not JSON, whichever class msgspec raises for it
(issue 44: msgspec 0.23 raises DecodeError where earlier releases raised UnicodeDecodeError)."""

from __future__ import annotations

import json

import msgspec
import pytest

from tracelens.contract import read_report
from tracelens.errors import InputError
from tracelens.json_text import _CHUNK, is_utf8, not_utf8
from tracelens.parsers import manifest_schema


def _raised(data: bytes) -> BaseException:
    try:
        msgspec.json.decode(data)
    except Exception as exc:       # noqa: BLE001 (whatever this msgspec raises is what is classified)
        return exc
    raise AssertionError(f"{data!r} decoded")


def test_what_the_installed_msgspec_raises_for_bad_bytes_is_not_utf8():
    assert not_utf8(_raised(b'["a\xffb"]'), b'["a\xffb"]')


def test_what_msgspec_before_0_23_raised_is_not_utf8():
    exc = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
    assert not_utf8(exc, b'["\xff"]')


@pytest.mark.parametrize("data", [b'["a"', b'{"a": NaN}', b"[1,]", b""])
def test_json_that_is_broken_but_utf8_is_not_a_utf8_error(data):
    assert not not_utf8(_raised(data), data)


def test_a_value_of_the_wrong_type_is_never_a_utf8_error():
    data = b'{"a": "\xff"}'
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.json.decode(b'{"a": 1}', type=dict[str, str])
    assert not not_utf8(info.value, data)


def test_a_character_across_the_check_s_chunks_is_utf8():
    """A four-byte character cut by the chunk boundary: the incremental check joins the halves."""
    data = b"a" * (_CHUNK - 2) + "\U0001F600".encode() + b"b"
    assert is_utf8(data) and not is_utf8(data[: _CHUNK])


def test_a_manifest_field_with_bad_bytes_is_named_and_left_out():
    doc = json.dumps({"schema": "tracelens.manifest/1", "world_size": 2,
                      "env": {"NCCL_ALGO": "MARK", "NCCL_PROTO": "Simple"}}).encode().replace(b"MARK", b"R\xffng")
    m, wrong = manifest_schema.decode(doc)
    assert m.world_size == 2 and m.env == {"NCCL_PROTO": "Simple"}
    assert wrong == [("env.NCCL_ALGO", "text that is not UTF-8")]


def test_a_saved_report_with_bad_bytes_is_one_input_error(tmp_path):
    path = tmp_path / "report.json"
    path.write_bytes(b'{"schema": "tracelens.report/1", "inputs": ["\xff"]}')
    with pytest.raises(InputError) as info:
        read_report(path)
    assert str(info.value) == f"{path}: not a JSON report: text that is not UTF-8"
