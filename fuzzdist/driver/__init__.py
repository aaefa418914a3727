"""The Hypothesis/pytest side: the pytest plugin (``plugin.py``) and its hooks (``newhooks.py``), the
Hypothesis profiles (``profiles.py``), each rank pool variant's database key (``variant_keys.py``), and
the properties' examples under HypoFuzz (``under_hypofuzz.py``).
The driver hands examples to a pool (:mod:`fuzzdist.pool`)."""
