"""What msgspec's JSON decoders raise for text they cannot read, told apart the same way under every release
the project supports.

Before 0.23, msgspec raised ``UnicodeDecodeError`` for a string that is not UTF-8; from 0.23 it raises
``msgspec.DecodeError`` ("Invalid UTF-8 encoded string"), the class it also raises for text that is not JSON.
A reader that treats a file with a few bad bytes (read, the bytes replaced and counted) differently from a
file that is not JSON (refused) asks :func:`not_utf8`, which looks at the bytes, never at the exception's
class or message. Only the words for an error (:func:`why`) read the message: a file may hold both bad bytes
and a syntax error, and the error then names the one the decoder met first.
"""

from __future__ import annotations

import codecs

import msgspec

# Everything a decoder raises for text it cannot read at all (a ValidationError is a DecodeError too: a
# reader that tells a value of the wrong type apart catches that first).
UNREADABLE = (msgspec.DecodeError, UnicodeDecodeError)

_CHUNK = 1 << 24        # bytes checked per step: a big file's check never holds a copy of it as text


def not_utf8(exc: BaseException, data) -> bool:
    """Whether ``exc``, raised while decoding ``data`` (bytes or a buffer), is for bytes that are not UTF-8.

    msgspec 0.23 gives no class or code of its own for it, so the answer comes from ``data`` itself; the
    check runs only on this error path."""
    if isinstance(exc, UnicodeDecodeError):
        return True
    if not isinstance(exc, msgspec.DecodeError) or isinstance(exc, msgspec.ValidationError):
        return False
    return not is_utf8(data)


def why(exc: BaseException) -> str:
    """A decoder's error in words: "text that is not UTF-8" for bad bytes (either release's way of saying
    it), else the decoder's own message."""
    if isinstance(exc, UnicodeDecodeError) or isinstance(exc, msgspec.DecodeError) and "UTF-8" in str(exc):
        return "text that is not UTF-8"
    return str(exc)


# JSON's whitespace (RFC 8259, section 2): a file of nothing else holds no document at all.
_JSON_SPACE = b" \t\r\n"


def blank(data) -> bool:
    """Whether ``data`` (bytes or a buffer) is empty or JSON whitespace only (``errors.EMPTY_FILE``). Asked
    only once a decode has failed, so a readable file never pays for it."""
    view = memoryview(data).cast("B")
    return all(not view[at:at + _CHUNK].tobytes().strip(_JSON_SPACE) for at in range(0, len(view), _CHUNK))


def is_utf8(data) -> bool:
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data).cast("B")
    try:
        for at in range(0, len(view), _CHUNK):
            decoder.decode(view[at:at + _CHUNK])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True
