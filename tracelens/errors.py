"""User-fixable problems. Anything else that escapes is a bug and keeps its traceback."""

from __future__ import annotations

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_NO_TRACE = 4      # collect: the job succeeded but no rank wrote a trace


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
        return f"{self.path}: {self.message}" if self.path else self.message


class UsageError(TracelensError):
    """Wrong arguments: no such file, nothing matched, conflicting options."""

    exit_code = EXIT_USAGE


class InputError(TracelensError):
    """A file that cannot be read as a trace: truncated, not JSON, not a profiler trace, empty."""

    exit_code = EXIT_INPUT


def _rebuild(cls, message, path):
    return cls(message, path=path)
