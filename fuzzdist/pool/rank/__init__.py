"""The rank side of a pool: the code that runs inside every rank process, for both transports
(answering the controller's messages, running one call isolated and seeded, reporting what the rank
did and where it waits).  The driver side is the rest of :mod:`fuzzdist.pool`::

    worker.py        answers the controller's messages, whichever transport brought them
    spawned.py       the entry point of a rank that RankPool spawned
    context.py       what a rank function sees: ``ctx``
    isolation.py     every example starts clean: seeded, global state snapshot and restored
    rank_state.py    where the rank's example stands, read without stopping it (hangs)
    rank_output.py   what the rank prints, kept per example
    process_tree.py  the rank's process tree lives no longer than the rank and its driver
    line_cover.py    ``--cover``: the lines the rank ran, example by example
    standalone.py    what a script exported by ``replay --export-script`` runs, with torch alone;
                     its seeding is the ranks' own"""
