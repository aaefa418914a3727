"""The Hypothesis/pytest side: the pytest plugin (``plugin.py``) and its hooks (``newhooks.py``), the
Hypothesis profiles (``profiles.py``), and each rank pool variant's database key (``variant_keys.py``).
The driver hands examples to a pool (:mod:`fuzzdist.pool`)."""
