"""A small package whose lines the coverage tests know: each line a rank runs is marked ``# reached: WHO``.

WHO is ``all`` (every rank, every example), ``rank0``/``rank1``/``rank2`` (only that rank), or ``never``.
"""
