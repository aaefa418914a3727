"""The dtype probe in a fresh interpreter: ``python -m fuzzdist.strategies._dtype_probe_child DEVICE``.

Run by :mod:`fuzzdist.strategies._dtype_probe` for a device whose runtime the driver must not start;
prints the names of the dtypes usable on ``DEVICE`` as its answer.  Not imported by the package, so
that ``-m`` runs it fresh.
"""

from __future__ import annotations

import sys

from fuzzdist.fresh_interpreter import print_answer
from fuzzdist.strategies._dtype_probe import probe_here

if __name__ == "__main__":
    print_answer(probe_here(sys.argv[1]))
