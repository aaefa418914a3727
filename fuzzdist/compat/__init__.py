"""Every use of Hypothesis's and pytest's internals, in one place, with the versions checked against:
``hypothesis_internals.py`` and ``pytest_internals.py``.

Nothing here is public: when Hypothesis or pytest changes an internal, this folder is the only one
to read and mend.
"""
