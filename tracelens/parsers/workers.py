"""Kineto files decoded by the worker pool (:mod:`tracelens.pool`) for ``load``, which hands back whole
RankTraces: the workers decode (gunzip, JSON, columns; :mod:`.kineto`) while this process assembles the
files already decoded, in input order. A report does not use this: its workers analyse whole files.

One file is decoded here: nothing would run beside its worker, and sending its columns back costs more than
the worker saves. A file a worker could not decode (it died, or met a bug) is decoded here; an InputError a
worker found is raised here exactly as if it had been found here.
"""

from __future__ import annotations

from pathlib import Path

from .. import pool

_parked: list = []


def decode(paths: list[Path], i: int):
    """The pool's job: the columns of ``paths[i]``. The events decoded are parked until the next job instead
    of being freed one by one: after the last, the worker's exit reclaims them at no cost."""
    # lazy: numpy and msgspec, imported in the worker (a forked one has them already)
    from .kineto import decode_file

    _parked.clear()
    return decode_file(Path(paths[i]), keep_alive=_parked)


class Decoding:
    """Workers decoding ``files``; :meth:`take` hands out each file's columns."""

    def __init__(self, files: list[Path], plan: pool.WorkerPlan) -> None:
        self._index = {f: i for i, f in enumerate(files)}
        self._pool = pool.Pool(len(files), plan.workers, decode, fork=plan.fork)
        self._pool.start(list(files))

    def take(self, path: Path):
        """The decoded columns of ``path``; None when this process should decode it itself. Raises the
        InputError the worker found."""
        i = self._index.pop(path, None)
        if i is None:
            return None
        answer = self._pool.answer(i)
        if answer is None:
            return None
        status, payload = answer
        if status == "error" and isinstance(payload, Exception):
            raise payload
        return payload if status == "ok" else None

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Decoding:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
