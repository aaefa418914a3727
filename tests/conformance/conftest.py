"""What the installed torch's gloo refuses, asked of torch itself: where gloo lacks an operation
(torch 2.6.0's gloo has no list-form reduce_scatter or alltoall, nor ReduceOp.AVG), check-pg's right answer is
"unsupported", and a test expects exactly that refusal there, and stays strict where gloo has it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Each probe runs on a one-rank gloo group in a fresh interpreter (no gloo threads in pytest's process,
# which the rank pools' fork server may fork from): None if gloo ran it, else what it raised.
_PROBE = r"""
import json

import torch
import torch.distributed as dist

from fuzzdist.conformance import gloo

# gloo built as check-pg's default factory builds it: the refusals read as check-pg reports them
pg = gloo(0, 1, dist.HashStore(), torch.device("cpu"))


def avg(pg):
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.AVG
    return pg.allreduce([torch.ones(2)], opts)


probes = {
    "reduce_scatter": lambda pg: pg.reduce_scatter([torch.zeros(2)], [[torch.ones(2)]], dist.ReduceScatterOptions()),
    "alltoall": lambda pg: pg.alltoall([torch.zeros(2)], [torch.ones(2)], dist.AllToAllOptions()),
    "allreduce AVG": avg,
}
refused = {}
for name, call in probes.items():
    try:
        call(pg).wait()
        refused[name] = None
    except RuntimeError as exc:
        refused[name] = str(exc).strip().splitlines()[0]
print(json.dumps(refused))
"""


@pytest.fixture(scope="session")
def gloo_refuses() -> dict[str, str | None]:
    """``{"reduce_scatter": ..., "alltoall": ..., "allreduce AVG": ...}`` (the list forms, and allreduce
    with ReduceOp.AVG): the first line of the error the installed gloo raises for that call, or None
    where it runs it."""
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"probing the installed gloo failed:\n{done.stderr}"
    refused: dict[str, str | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return refused
