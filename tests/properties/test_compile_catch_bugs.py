"""The compile family can fail: with a planted graph pass in a ``torch.compile`` backend (a compile-only
deviation: eager never runs it), fuzzdist catches the bug and shrinks it to a minimal program."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_compile
from helpers.minimal import minimal_failure

from fuzzdist.pool.capabilities.torch_features import missing_functional_collectives

if missing_functional_collectives():  # an older torch; any other ImportError below fails, with its traceback
    pytest.skip(missing_functional_collectives() or "", allow_module_level=True)

from fuzzdist.problems import Kind
from fuzzdist.properties.compile import functional
from fuzzdist.properties.compile.functional import Step

pytestmark = pytest.mark.fuzzdist(world_size=2)


def _minimal(rank_pool, backend):
    return minimal_failure(
        partial(functional.check, rank_pool), case=functional.compile_cases(rank_pool.world_size, backends=(backend,))
    )


def test_catches_a_wait_moved_after_a_use(rank_pool):
    f = _minimal(rank_pool, planted_compile.wait_after_use)
    program = f.case.program
    # One drawn step: the in-place c10d all_reduce.  Dynamo rewrites it into the functional all_reduce of a
    # copy, its wait_tensor, then an aten.copy of the waited result back into the copy: a use of the result
    # inside the graph, which the pass moves the wait after.  (The functional form alone has no use in the
    # graph but further waits, and needs a compute step more.)  SUM (every rank's sum differs from its own
    # input: normal inputs are never 0) of the smallest float32 input, (world, 1).
    assert program.steps == (Step("c10d", "all_reduce", (0,)),), program
    assert program.dtype == torch.float32 and program.shape == (2, 1), program
    for rank, problems in enumerate(f.results):
        # the write-back read the buffer before the all_reduce wrote it: the value is the rank's own input
        assert [(p.kind, p.what) for p in problems] == [(Kind.MISMATCH, "value 1")], (rank, problems)


def test_catches_an_all_reduce_output_aliasing_its_input(rank_pool):
    f = _minimal(rank_pool, planted_compile.all_reduce_aliasing_input)
    program = f.case.program
    # One drawn step: a functional all_reduce of the input (its wait appended at the end).  The in-place c10d
    # form reduces a copy, which may alias harmlessly; SUM of the smallest float32 input changes the input.
    assert program.steps == (Step("issue", "all_reduce", (0,)), Step("wait", "wait_tensor", (0,))), program
    assert program.dtype == torch.float32 and program.shape == (2, 1), program
    for rank, problems in enumerate(f.results):
        # the values are right: only the input, left unmodified eagerly, was overwritten
        assert [(p.kind, p.what) for p in problems] == [(Kind.MISMATCH, "the input afterwards")], (rank, problems)


# each example compiles DDP's forward afresh: seconds, minutes on a loaded machine
@pytest.mark.fuzzdist(world_size=2, timeout=300.0)
def test_catches_compiled_ddp_averaging_gradients_twice(rank_pool):
    from fuzzdist.properties.compile import ddp
    from fuzzdist.strategies import DDPConfig

    f = minimal_failure(
        partial(ddp.check, rank_pool),
        case=ddp.compiled_ddp_cases(rank_pool.world_size, backends=(planted_compile.ddp_gradients_averaged_twice,)),
    )
    case = f.case
    # Dividing by a batch of 1 changes nothing: some rank needs a batch of 2.  The shortest draw of one is an even
    # batch of 2 (an uneven one draws a size per rank more); every other field at its minimum: one 1->1 layer,
    # DDP's defaults, one SGD step, float32, seed 0, no compiled autograd.
    assert case.config == DDPConfig(widths=(1, 1), batch_sizes=(2, 2)), case
    assert (case.dtype, case.compiled_autograd, case.seed) == (torch.float32, False, 0), case
    for rank, problems in enumerate(f.results):
        # both parameters' gradients are halved, so the parameters the step leaves differ too
        assert sorted((p.kind, p.what) for p in problems) == [
            (Kind.MISMATCH, "param layers.0.bias after 1 steps"),
            (Kind.MISMATCH, "param layers.0.weight after 1 steps"),
            (Kind.MISMATCH, "step 0 grad layers.0.bias"),
            (Kind.MISMATCH, "step 0 grad layers.0.weight"),
        ], (rank, problems)


@pytest.mark.fuzzdist(world_size=2, timeout=300.0)
def test_dtensor_programs_catch_an_all_reduce_output_aliasing_its_input(rank_pool):
    from fuzzdist.properties.compile import dtensor

    f = minimal_failure(
        partial(dtensor.check, rank_pool),
        case=dtensor.dtensor_cases(backends=(planted_compile.all_reduce_aliasing_input,)),
    )
    program = f.case.program
    # The compiled graph needs an all_reduce: a Partial value reduced inside it.  One step can't: a sum leaves
    # its Partial result to the caller, and a redistribute of the drawn placements all-gathers or chunks.  So a
    # sum over the dim the input is sharded on, then a compute op of that Partial sum, which DTensor reduces
    # first; the reduction, done in place, turns the Partial value's own pieces into the sum, which
    # full_tensor() then sums again: that value alone is wrong.  Those two steps, on the smallest input, (1, 1)
    # float32; which dim is sharded and summed is left open (changing both together is a move the shrinker
    # doesn't make).
    assert (program.shape, program.dtype) == ((1, 1), torch.float32), program
    assert len(program.steps) == 2, program
    (partial_sum,) = [
        i + 1
        for i, step in enumerate(program.steps)
        if step.kind == "sum" and step.args == (0,) and program.placement == f"S{step.dim}"
    ]
    assert any(s.kind == "compute" and partial_sum in s.args for s in program.steps[partial_sum:]), program
    for rank, problems in enumerate(f.results):
        assert [(p.kind, p.what) for p in problems] == [(Kind.MISMATCH, f"value {partial_sum}")], (rank, problems)
