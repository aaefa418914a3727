"""Plants the time-to-find benchmark's bug in a process started with this folder on ``PYTHONPATH``
and ``FUZZDIST_BENCH_PLANT`` set (see ``bench/_planted_campaign.py``); otherwise does nothing.

The checkout this folder is in goes first on ``sys.path``: ``site`` runs before the current directory
is put there, and an installed fuzzdist (an editable install of another checkout) must not win."""

import os
import sys

if os.environ.get("FUZZDIST_BENCH_PLANT"):
    _bench = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [os.path.dirname(_bench), _bench]
    import _planted_campaign

    _planted_campaign.install_from_env()
