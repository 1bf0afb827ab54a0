"""What ``tracelens annotate`` adds to a trace, as far as a reader must know it: every event it adds carries
the category below (its metadata events too), and a parser leaves such events out, so that an annotated
trace reports as its input did. The overlay it writes for an Nsight Systems export (the added tracks alone)
begins with ``OVERLAY_HEAD``: finding the inputs, a folder's overlays are skipped, not read as traces.
Written by ``renderers/added_tracks.py``; read by the Kineto parser and ``parsers.sniff_json``."""

CATEGORY = "tracelens"
OVERLAY_HEAD = b'{"otherData":{"tracelens":"overlay"'
