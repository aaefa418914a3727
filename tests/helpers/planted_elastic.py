"""A planted bug for the elastic property: an agent that never restarts the worker group, whatever
``--max-restarts`` says (torchrun run with ``--max-restarts=0``)."""

from __future__ import annotations

from collections.abc import Sequence

from fuzzdist.properties.elastic import launch


def never_restarting_agent(args: Sequence[str], env: dict[str, str], deadline_s: float, log: str) -> int | None:
    """torchrun, with its ``--max-restarts`` replaced by 0."""
    args = ["--max-restarts=0" if a.startswith("--max-restarts=") else a for a in args]
    return launch.torchrun(args, env, deadline_s, log)
