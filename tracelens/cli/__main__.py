"""``python -m tracelens.cli``: the same as the ``tracelens`` command."""

import sys

from .._speed import one_blas_thread
from . import main

one_blas_thread()
sys.exit(main())
