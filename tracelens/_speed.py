"""Speed tricks: the places where tracelens does something another way than the plain, public one because
that way is measurably faster. One function per trick, each saying why it pays and what the plain way
would be; what each buys is measured in bench/RESULTS.md ("Speed tricks", and "Measurements once kept in
the code", tracelens/_speed.py). When a trick stops paying, it goes, and its callers get the plain call back.

Measured and dropped (2026-11-23): pausing the cyclic GC while a Kineto trace is decoded and assembled
(decoded events are ``gc=False`` msgspec structs, so no collection runs there either way), and
``pd.Categorical.from_codes(..., validate=False)`` (too little to keep; the argument needs pandas 2.1).
Gone with what it sped up: building DataFrames through pandas' internal ``DataFrame._from_arrays`` (the
model's tables are numpy columns now, :mod:`tracelens.model.table`). Elsewhere, not tricks: ISA-L inflate
(a faster library, ``parsers/kineto/inflate.py``), the decode workers (``parsers/workers.py``).

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
    (its fork handler); tracelens does no linear algebra, so the threads are start-up and fork cost for
    nothing, more of it the more cores (bench/RESULTS.md, "one BLAS thread"). Set for this process and the
    decode workers it starts; a job that ``tracelens collect`` runs gets the environment the user had
    (:func:`user_environ`).
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

    A fresh-interpreter decode worker imports the Kineto decode stages alone, without the build stage, the
    model and the assembly; finding the inputs reads NCCL logs' heads without compiling the NCCL log
    parser's line patterns, which wait until the workers run (bench/RESULTS.md, "lazy package exports").
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

    A large export's rows would set off a full collection, which rescans every object the imports made;
    paused, a cold report of a large export runs one fewer (bench/RESULTS.md, "cyclic GC paused").
    Plain way: leave the collector on.
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

    Faster than Arrow (``split_pattern`` and a cast), and several times faster than ``str.split`` and
    ``np.array(..., dtype=np.int64)`` (the plain way; bench/RESULTS.md, "np.fromstring"). NumPy warns
    about the partial read, which the count check already catches: the warning is silenced here.
    """
    import numpy as np      # lazy: this module loads before the report's workers fork

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return np.fromstring(text, dtype=np.int64, sep=",")
    except ValueError:
        return None


def map_sqlite_pages(con) -> None:
    """SQLite reads the database's pages in place through mmap instead of copying each in with a read().

    It saves a copy of every page a warm report reads (bench/RESULTS.md, "SQLite mmap"). SQLite's caveat,
    a file truncated by another process while it is mapped, does not arise for an export being reported on.
    Plain way: SQLite's default, no mapping.
    """
    con.execute("PRAGMA mmap_size = 1073741824")


def exit_without_teardown(code: int = 0) -> NoReturn:
    """End the process at once: no interpreter teardown, no freeing of what is still alive, no atexit.

    Only for a process with nothing left to do: every stream it wrote is flushed or closed first. A decode
    worker parks its last file's decoded events instead of freeing them (``decode_file(keep_alive=...)``)
    and ends here, so it answers sooner and takes less CPU from the main process. The console script
    (``tracelens.cli.run``) ends here too: freeing a report's tables and every imported module object by
    object is work nobody waits for, and nothing is left to do (no atexit work, no temporary files, decode
    workers already closed). bench/RESULTS.md, "exit without teardown".
    Plain way: free everything, return, let the interpreter tear down.
    """
    os._exit(code)
