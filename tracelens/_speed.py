"""Speed and memory tricks: the places where tracelens does something another way than the plain, public one
because that way is measurably faster or smaller. One function per trick, each saying why it pays and what the
plain way would be; the measurements, and the tricks measured and dropped, are in bench/RESULTS.md ("tracelens/_speed.py").
When a trick stops paying, it goes, and its callers get the plain call back. Elsewhere, not tricks: ISA-L
inflate (a faster library, ``parsers/kineto/inflate.py``), the worker pool (``pool.py``).

This module imports no numpy at import time: decode workers import it, and they start before the main
process has imported numpy.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
import warnings
from typing import NoReturn


# Environment variables this process set for itself (:func:`one_blas_thread`): never passed on to a job.
_SET_HERE: set[str] = set()


def one_blas_thread() -> None:
    """NumPy's OpenBLAS loads with one thread, where the user did not choose a count.

    OpenBLAS starts a thread per core when numpy is imported, and joins them again before every fork
    (its fork handler); tracelens does no linear algebra, so the threads are pure cost, more of it the more
    cores there are. Set for this process and the workers it starts; a job that ``tracelens collect`` runs
    gets the environment the user had (:func:`user_environ`).
    Plain way: leave OpenBLAS its default.
    """
    if "numpy" not in sys.modules and "OPENBLAS_NUM_THREADS" not in os.environ:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        _SET_HERE.add("OPENBLAS_NUM_THREADS")


def user_environ() -> dict:
    """This process's environment without what :func:`one_blas_thread` set: the environment for a job."""
    return {k: v for k, v in os.environ.items() if k not in _SET_HERE}


def lazy_exports(package: str, names: dict[str, str]):
    """``__getattr__`` and ``__dir__`` for a package whose public names (``names``: each name -> the module
    below ``package`` that defines it) are imported on first use, so that importing one of its modules
    imports none of the others.

    A fresh-interpreter worker imports the Kineto decode stages alone, without the build stage, the model
    and the assembly; finding the inputs reads NCCL logs' heads without compiling the NCCL log parser's
    line patterns, which are then paid after the workers start.
    Plain way: the package's ``__init__`` imports each name from its module."""
    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__


@contextlib.contextmanager
def no_cyclic_gc():
    """The cyclic garbage collector paused while an Nsight Systems export is read and assembled.

    A cold report of a large export runs one full collection fewer with it, and a full collection rescans
    every object the imports made. Plain way: leave the collector on.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def ints_from_text(text: str):
    """The comma-separated integers in ``text`` as an int64 array, read in C by ``np.fromstring``; it stops
    at the first value that is not an integer, so the caller compares the count (None: nothing read).

    Faster than Arrow (``split_pattern`` and a cast) and than ``str.split`` and ``np.array(...,
    dtype=np.int64)`` (the plain way), which builds a Python int per value. NumPy warns about the partial
    read, which the count check already catches: the warning is silenced here.
    """
    # lazy: numpy, which the workers import after they start (this module is imported before)
    import numpy as np

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return np.fromstring(text, dtype=np.int64, sep=",")
    except ValueError:
        return None


def map_sqlite_pages(con) -> None:
    """SQLite reads the database's pages in place through mmap instead of copying each in with a read().

    One copy fewer of every page read. SQLite's caveat, a file truncated by another process while it is
    mapped, does not arise for an export being reported on. Plain way: SQLite's default, no mapping.
    """
    con.execute("PRAGMA mmap_size = 1073741824")


def exit_without_teardown(code: int = 0) -> NoReturn:
    """End the process at once: no interpreter teardown, no freeing of what is still alive, no atexit.

    Only for a process with nothing left to do: every stream it wrote is flushed or closed first. Freeing
    object by object what is about to be reclaimed as a whole is pure cost: the console script
    (``tracelens.cli.run``) ends here once the report is written (no atexit work, no temporary files,
    workers already closed); a pool worker ends the same way (``os._exit``), its last file's decoded events
    parked rather than freed (``decode_file(keep_alive=...)``).
    Plain way: free everything, return, let the interpreter tear down.
    """
    os._exit(code)


def give_back_freed_memory() -> None:
    """The C allocator returns the pages of what was freed to the system (glibc's ``malloc_trim``).

    Arrays under the allocator's mmap threshold (128 KiB; the columns of one rank's NCCL Inspector log are
    16 KiB at 2,000 collectives) live in its heap, and glibc keeps a freed one's pages: after a run's logs
    are joined into one table, 450 MB of them stayed resident at 4,096 ranks (bench/RESULTS.md, "NCCL
    Inspector logs of thousands of ranks"). dask.distributed calls the same for its workers (its docs,
    "Memory not released back to the OS"). Elsewhere than glibc, nothing. Plain way: leave the pages to the
    allocator, which reuses them for small allocations only.
    """
    import ctypes       # lazy: only reports of millions of rows need it, and every command imports this module
    import ctypes.util  # lazy: as ctypes

    global _TRIM
    if _TRIM is None:
        try:
            _TRIM = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "malloc_trim", False)
        except OSError:
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM = None       # glibc's malloc_trim, False where there is none
