"""``python -m tracelens.cli``: the same as the ``tracelens`` command."""

import sys

from . import main

sys.exit(main())
