"""The Hypothesis/pytest side: the pytest plugin and its hooks, the Hypothesis profiles, and each rank
pool variant's database key.  The driver hands examples to a pool (:mod:`fuzzdist.pool`)."""
