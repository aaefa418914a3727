"""Property modules that refuse to import, by design, on a torch without what they check.

Pipelining checks the schedules' ``scale_grads``, which torch 2.6.0 lacks: the module raises an
ImportError of its own that names the installed torch, and its property file then skips, saying so.
Any other import error is a failure.  Each module maps to the property file that imports it.
"""

from __future__ import annotations

REFUSE_ON_OLDER_TORCH = {"fuzzdist.properties.pipelining": "properties/test_pipelining.py"}
