"""Every file tracelens writes is created here, so that nothing already at its path is followed or truncated.

A file is written whole under a fresh name in its own folder (:func:`fresh`: ``O_CREAT | O_EXCL |
O_NOFOLLOW`` under a random name, so no one can plant a link at it beforehand), then renamed over its path
(atomic; what was there, a link included, is replaced as a name: a link's target and a hard link's other
names keep their bytes). A reader
never sees half a file, and a write that fails leaves no temporary file. An appended file (the gate's
Markdown summary) is opened with ``O_NOFOLLOW``: a link there is refused. The history database, which SQLite
changes in place, refuses a link at its path itself (:func:`tracelens.history_db.open_db`).

docs/errors.md ("What a writer does with its path") says, per writer, what the user sees.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, Iterator


def fresh(path: str | os.PathLike, suffix: str = ".tmp") -> tuple[int, Path]:
    """A new, empty file beside ``path`` under a random name (``O_CREAT | O_EXCL | O_NOFOLLOW``: made by this
    call, never a file or link that was there), as (its descriptor, its name). Its mode is what ``open``
    would give ``path`` (0666 less the umask, applied by the kernel)."""
    target = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{os.urandom(6).hex()}{suffix}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:         # 2^48 names: only a folder filled on purpose gets here twice
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


@contextlib.contextmanager
def replacing(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into; on a clean exit it becomes ``path``. ``suffix``:
    the temporary name's end (the cache's clean-up looks for ``.tmp``)."""
    fd, tmp = fresh(path, suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:           # a failed write, Ctrl-C: no file, and no temporary file left either
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with replacing(path) as fh:
        fh.write(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def append_text(path: str | os.PathLike, text: str) -> None:
    """``text`` added at the end of ``path`` (created when absent); a link at ``path`` is refused (OSError),
    and so is a file with other names (a hard link: appending would change them too). A FIFO is written only
    when something reads it (:func:`_open_unblocked`)."""
    try:
        fd = _open_unblocked(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link: tracelens never writes through one", str(path)) from None
        raise
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        os.close(fd)
        raise OSError(errno.EMLINK, f"a hard link ({st.st_nlink} names): tracelens never appends to a file "
                                    "with other names", str(path))
    with os.fdopen(fd, "ab") as fh:
        fh.write(text.encode("utf-8"))


def write_device(path: str | os.PathLike, text: str) -> None:
    """``text`` written to the device or FIFO at ``path`` (``/dev/stdout``, a named pipe), as a shell would;
    a FIFO no one reads is an error (:func:`_open_unblocked`), not a wait forever."""
    with os.fdopen(_open_unblocked(path, os.O_WRONLY), "w", encoding="utf-8") as fh:
        fh.write(text)


def _open_unblocked(path: str | os.PathLike, flags: int) -> int:
    """``path`` opened with ``flags`` without waiting at the open: a FIFO without a reader is ENXIO (``No such
    device or address``) at once, where a plain open would wait for one forever. Writes then block as usual."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    os.set_blocking(fd, True)
    return fd
