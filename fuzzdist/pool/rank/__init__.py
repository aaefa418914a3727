"""The rank side of a pool: the code that runs inside every rank process, for both transports
(answering the controller's messages, running one call isolated and seeded, reporting what the rank
did and where it waits).  The driver side is the rest of :mod:`fuzzdist.pool`."""
