"""The training job the elastic property hands to ``torchrun``: run as a script (``torchrun ... worker.py
PLAN WORKDIR``), with torch and the standard library alone, so that every worker start costs no more than
torch's import.

Each worker records its attempt (``TORCHELASTIC_RESTART_COUNT``), ``RANK``, ``WORLD_SIZE`` and
``GROUP_RANK`` in ``WORKDIR/workers.log`` when it starts and again once it joined the group torchrun set
up (``init_process_group`` over ``env://``); it resumes from the checkpoint if
there is one, and runs the remaining steps: each an ``all_reduce`` of the ranks' contributions added to the
state, then a checkpoint that rank 0 writes (to a temporary file, renamed) between two barriers.  The
plan's failure for this attempt, if any, kills the drawn rank at the first step it runs from the drawn one,
before or after that step's ``all_reduce`` (never after the checkpoint: the next attempt always has a step
left to fail in).  Rank 0 writes the final state, as JSON, to result.json in its work folder.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

COVER = "FUZZDIST_PROCESS_COVER" in os.environ
"""Under ``--cover``, fuzzdist's recorder (the one import beyond torch, made only then) records this worker."""


def contribution(rank: int, step: int) -> torch.Tensor:
    """Rank ``rank``'s term at ``step``: small integers in float64, so that every sum is exact."""
    return torch.arange(4, dtype=torch.float64) + float((rank + 1) * (step + 1))


def record(workdir: str, event: dict[str, Any]) -> None:
    """Append ``event`` to ``WORKDIR/workers.log``: one short append, a whole line whoever writes beside it."""
    with open(os.path.join(workdir, "workers.log"), "a") as log:
        log.write(json.dumps(event) + "\n")


def die(failure: dict[str, Any]) -> None:
    """End this worker as the plan says: ``os._exit(code)`` or a signal sent to itself."""
    if COVER:  # --cover: the lines so far, before an end that skips the exit handlers
        from fuzzdist.pool import process_cover

        process_cover.flush()
    if failure["signal"]:
        os.kill(os.getpid(), getattr(signal, failure["signal"]))
    os._exit(failure["exit_code"])


def main(plan: dict[str, Any], workdir: str) -> None:
    """Run the job's remaining steps on this worker, failing where ``plan`` says."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    seen = {"attempt": attempt, "rank": rank, "world_size": world_size, "group_rank": int(os.environ["GROUP_RANK"])}
    record(workdir, {**seen, "event": "started"})
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    record(workdir, {**seen, "event": "joined"})
    path = os.path.join(workdir, "checkpoint.pt")
    state: dict[str, Any] = {"step": 0, "total": torch.zeros(4, dtype=torch.float64)}
    if os.path.exists(path):
        state = torch.load(path)
    failures = plan["failures"]
    failure = failures[attempt] if attempt < len(failures) else None
    mine = failure is not None and failure["rank"] == rank
    for step in range(state["step"], plan["steps"]):
        dying = mine and step >= failure["step"]  # type: ignore[index]
        if dying and failure["when"] == "before":  # type: ignore[index]
            die(failure)  # type: ignore[arg-type]
        term = contribution(rank, step)
        dist.all_reduce(term)
        if dying:
            die(failure)  # type: ignore[arg-type]
        state = {"step": step + 1, "total": state["total"] + term}
        dist.barrier()  # every rank has its step's term before the checkpoint moves on
        if rank == 0:
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
        dist.barrier()  # the checkpoint is in place before the next step
    if rank == 0:
        with open(os.path.join(workdir, "result.json"), "w") as out:
            json.dump({"total": state["total"].tolist(), "step": state["step"]}, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    if COVER:
        from fuzzdist.pool import process_cover

        process_cover.record_this_process()
    main(json.loads(sys.argv[1]), sys.argv[2])
