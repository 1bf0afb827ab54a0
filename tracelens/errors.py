"""User-fixable problems. Anything else that escapes is a bug and keeps its traceback."""

from __future__ import annotations

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_NO_TRACE = 4      # collect: the job succeeded but no rank wrote a trace


def printable(text: str, one_line: bool = False) -> str:
    """``text`` with every byte of a name that is not UTF-8 written as ``\\xNN``: Python reads such bytes of
    a file name as lone surrogates, which no UTF-8 output (a terminal, a file, JSON) can hold. ``one_line``:
    control characters too (a file name may hold a newline; an error or a name in a report stays one line).
    Other text is returned as it is."""
    if text.isprintable() if one_line else text.isascii():
        return text
    return "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF
                   else f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF
                   else f"\\x{ord(c):02x}" if one_line and (ord(c) < 0x20 or ord(c) == 0x7F) else c for c in text)


class TracelensError(Exception):
    """A problem the user can fix; printed as one line by the CLI, never as a traceback."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = path

    def __reduce__(self):
        # Keyword-only fields are not in ``args``; decode workers pickle these errors back to the caller.
        return _rebuild, (type(self), self.message, self.path)

    def __str__(self) -> str:
        return printable(f"{self.path}: {self.message}" if self.path else self.message, one_line=True)


class UsageError(TracelensError):
    """Wrong arguments: no such file, nothing matched, conflicting options."""

    exit_code = EXIT_USAGE


class InputError(TracelensError):
    """A file that cannot be read as a trace: truncated, not JSON, not a profiler trace, empty."""

    exit_code = EXIT_INPUT


# The InputError of a file with nothing in it (no bytes, or whitespace only), the same words from every reader:
# a JSON decoder's "Input data was truncated" reads as a file cut short, which sends one looking for a
# writer that died rather than one that never wrote.
EMPTY_FILE = "empty file"


def _rebuild(cls, message, path):
    return cls(message, path=path)
