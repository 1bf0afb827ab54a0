"""``python -m tracelens.cli``: the same as the ``tracelens`` command, its fast exit included."""

from . import run

run()
