"""The Kineto parser: a PyTorch profiler trace (Chrome-trace JSON, gzipped or not) -> one RankTrace.

Its stages, in order: ``inflate`` (the file's bytes, gunzipped), ``schema`` (the typed msgspec document;
``repair`` reads a file with values of the wrong type event by event), ``event_columns`` (decoded events ->
plain columns: where a Kineto event becomes a row), ``decode`` (runs those in order; ``split`` and
``slices`` decode a file over 64 MB a slice at a time) and ``build`` (the columns -> a RankTrace, through
the shared :mod:`..assemble`). The decode stages import neither pandas nor the model: they run in decode
workers (:mod:`..workers`), whose product, :class:`.event_columns.KinetoColumns`, pickles cheaply.

The rest of tracelens uses the names below, and only these; each is imported on first use, so that a decode
worker imports the decode stages without ``build`` and the model.
"""

from ..._speed import lazy_exports

__all__ = ["parse", "decode_file", "events_start", "Halves", "Members", "MAX_INFLATE_ENV", "EVENTS_WITHIN",
           "max_inflate"]

# The inflate limit's setting: it changes what parsing gives, so it is part of every cache key. Defined here,
# not in ``inflate``, so that a warm report reads it without importing the inflate stage (ISA-L).
MAX_INFLATE_ENV = "TRACELENS_MAX_INFLATE"
# How far into a trace's JSON the ``[`` of its events must be for ``tracelens annotate`` (docs/errors.md): the
# copy holds the head up to it in memory. Beside ``events_start``, which finds it; plain, so that it costs no
# import.
EVENTS_WITHIN = 64 << 20

__getattr__, __dir__ = lazy_exports(__name__, {
    "parse": "build",                 # a file -> its RankTrace (decoded here, or by a worker: ``decoded=``)
    "decode_file": "decode",          # a file -> KinetoColumns: what a decode worker runs
    "events_start": "split",          # where a trace's events array opens (tracelens annotate inserts there)
    "Halves": "halves",               # one file's events decoded half here, half in a forked worker
    "Members": "inflate",             # every member of a gzip stream inflated in turn (annotate, the sniff)
    "max_inflate": "inflate",         # how far a gzip file may inflate (TRACELENS_MAX_INFLATE)
})
