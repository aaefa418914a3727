"""``python -m fuzzdist``: the ``fuzzdist`` command."""

import sys

from fuzzdist.cli import main

sys.exit(main())
