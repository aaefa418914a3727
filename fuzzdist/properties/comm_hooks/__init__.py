"""DDP communication hooks and gradient accumulation: what each hook's documentation promises.

Every case trains a ``fst.DDPConfig`` model under DistributedDataParallel with a hook registered
(``DistributedDataParallel.register_comm_hook``) next to a local reference computed with no
communication: each rank's *local* gradient ``g_r`` (the gradient of its mean loss on its own
batch, from a copy of the model, see ``local_gradients``).  Configs come from ``fst.ddp_configs``
without buffers (``hook_configs``): buffers are DDP parity's subject (``fuzzdist.properties.ddp``);
here every rank's forward is the reference's.  Every step also checks that the synced gradients,
and the parameters at the end, are bitwise equal on every rank (except where post-local SGD lets
ranks differ, see below).

Sub-families, each with its contract and the doc lines it comes from:

* **allreduce** (``default_hooks.allreduce_hook``): "If user registers this DDP communication hook,
  DDP results is expected to be same as the case where no hook was registered."  Checked
  against a twin DDP without a hook on the same data, every step: *bitwise* where the world size
  is a power of two (scaling by 1/W is then exact whichever way it is done), else within
  ``torch.testing``'s tolerance: seen on torch 2.13, at 3 ranks the hook's gradients differ from
  DDP's own in the last bit, so "same" is read as "same up to the rounding of the 1/W scaling",
  and the twin starts each step from the hooked model's weights (those last bits would otherwise
  grow through the optimizer: Adam makes a whole step of a near-zero gradient's sign).  Also
  within ``torch.testing``'s tolerance of the exact mean ``(1/W) sum_r g_r``.
* **fp16 / bf16** (``fp16_compress_hook``, ``bf16_compress_hook``, ``fp16_compress_wrapper`` and
  ``bf16_compress_wrapper`` of ``allreduce_hook``): "casts GradBucket tensor to half-precision
  ... and then divides it by the process group size.  It allreduces those float16 gradient
  tensors ... casts it back to the input data type"; "fp16_compress_hook is equivalent to
  fp16_compress_wrapper(allreduce_hook)".  So each element is ``sum_r round(round(g_r) / W)`` in
  the half type: one rounding of the cast, one of the division and W - 1 of the sum, each within
  the half type's unit roundoff ``u`` (2^-11 for float16, 2^-8 for bfloat16) of the terms, plus
  half a subnormal spacing each near zero: ``|G - mean| <= (W + 2) u mean_r|g_r| + 3W *
  spacing``.  Overflow, read from the same lines: a ``g_r`` whose cast to float16 is infinite
  makes the element infinite with that sign (NaN if ranks overflow to opposite signs), as the
  cast-then-divide order implies.  The loss is scaled by a drawn power of two up to 2^24 (loss
  scaling, as under AMP), so gradients reach float16's range; a step whose synced gradient is not
  finite is skipped and the others are unscaled before the optimizer step, as ``GradScaler`` does.
  bfloat16 has float32's range: its overflow needs float32 values within 2^-8 of float32's maximum
  and is not drawn.  The bf16 hooks are not drawn on CPU: both docstrings say they require NCCL
  ("requires NCCL version later than 2.9.6"), and DDP refuses ``bf16_compress_hook`` without it;
  ``compression_cases(..., hooks=tuple(COMPRESSION_HOOKS))`` draws them for an nccl pool.
* **PowerSGD** (``powerSGD_hook.PowerSGDState``, ``powerSGD_hook``, ``batched_powerSGD_hook``):
  "this communication hook enforces vanilla allreduce for the first start_powerSGD_iter
  iterations": before it, gradients equal a twin DDP without a hook (as for allreduce_hook).  "If the specified
  compression rate threshold cannot be satisfied, the tensor will be directly allreduced without
  compression" (the test is ``(n + m) * min(n, m, rank) * min_compression_rate < n * m`` for the
  gradient viewed as ``n x m = shape[0] x rest``, from ``_should_compress``): those tensors get
  the mean of the ranks' inputs.  A compressed tensor with ``matrix_approximation_rank`` at
  least ``m <= n`` is approximated by ``P P^T M`` with ``P`` an orthonormal basis of ``M Q``, ``Q``
  square: no approximation, so the mean again, within a bound that grows with the condition
  number of the summed matrix (Gram-Schmidt's and QR's loss of orthogonality, ``eps * kappa``) and
  ``orthogonalization_epsilon / sigma_min`` (the epsilon added to every column norm).  With warm
  start, ``Q`` is the previous step's ``M^T P`` ("reuse Qs from the previous iteration"), square
  but invertible only while every earlier compressed ``M`` of that tensor was: after a singular or
  ill-conditioned one (an all-zero gradient behind a dead ReLU) power iteration can't regain the
  lost directions, and that tensor gets no value check from then on.  Summed
  matrices with ``kappa > 1e3`` and wide ones (``m > n``, whose ``Q`` is a random projection no
  local reference knows) get no value check.  ``batched_powerSGD_hook`` views the whole bucket as
  one zero-padded square matrix of side ``s``; with rank ``s`` it is the mean the same way.
  Error feedback, read from the paper the docstring cites: the error a rank carries to the next
  step is its input (local gradient plus the error carried in) minus what the hook returned, so
  the *means* above are of ``g_r + e_r``, and each rank's new error is checked against that
  recurrence (the errors differ across ranks by design).  Warm start: the low-rank ``P`` and
  ``Q`` the state keeps are bitwise equal on every rank.  Inputs the docs forbid are not drawn:
  ``start_powerSGD_iter <= 1`` with error feedback or warm start (``ValueError``), and
  ``orthogonalization_epsilon=0`` where a column can be all zeros ("to prevent div-by-zero error
  if any column has all 0s": deeper layers behind a ReLU, unused parameters).
* **post-local SGD** (``post_localSGD_hook``, ``PostLocalSGDState``,
  ``averagers.PeriodicModelAverager``, ``PostLocalSGDOptimizer``): "In the first 100 steps, run
  global gradient averaging like normal DDP at every step.  After 100 steps, run model averaging
  every 4 steps" with "warmup_steps must be the same as start_localSGD_iter".  The reference
  simulates the W replicas locally: before ``start_localSGD_iter`` every replica steps with the
  mean gradient; after it, with its own gradient (``post_local_gradient_allreduce=False``) or the
  subgroup's mean (``True``, the subgroup being the whole group), and at steps ``t >= warmup``
  with ``(t - warmup) % period == 0`` the parameters become their mean over replicas.  Each rank's
  parameters must equal its replica's after every step, and be bitwise equal across ranks after
  every step where the replicas are equal.  SGD only: the check compares trajectories, not single
  steps, and Adam's normalisation amplifies last-bit differences of near-zero gradients.
* **no_sync** (``DistributedDataParallel.no_sync``): "gradients will be accumulated on module
  variables, which will later be synchronized in the first forward-backward pass exiting the
  context".  ``config.steps - 1`` micro-batches inside ``no_sync``, then one synced backward: inside,
  each rank's gradients are the sum of its own local gradients; after, they equal the gradient of
  one backward over *all* ranks' micro-batches concatenated, each element weighted by ``1/(W *
  b_r * out_features)`` (rank r's mean losses, summed over micro-batches, averaged over ranks).
* **reordered**: the allreduce and fp16 hooks over a ``ReorderingProcessGroup`` that completes
  their futures in a drawn order (``completion_schedules``, ``pg_wrapper`` of
  ``fuzzdist.properties.ddp``): the same contracts must hold.

The implementation under test is a keyword of each ``check_*``: ``hook=`` (a picklable hook
callable), ``state_factory=`` (``PowerSGDState``, ``PostLocalSGDState``), ``averager_factory=``,
``optimizer_factory=``, ``no_sync=``.

Modules: ``compression.py`` (the compression hooks), ``powersgd.py`` (PowerSGD), ``local_sgd.py``
(post-local SGD), ``no_sync.py`` (``no_sync`` and hooks), ``reordered.py`` (futures completed in a drawn
order), ``common.py`` (what they share), ``known_bugs.py`` (the torch bugs this family meets, listed in
:mod:`fuzzdist.known_bugs.entries`).
"""

from __future__ import annotations

from fuzzdist.properties.comm_hooks.common import DTYPES, SEEDS, Tensors, hook_configs, local_gradients, mean_problem
from fuzzdist.properties.comm_hooks.compression import (
    COMPRESSION_HOOKS,
    CPU_HOOKS,
    CompressionCase,
    bf16_wrapped_allreduce_hook,
    check_compression,
    compressed_training,
    compression_cases,
    fp16_wrapped_allreduce_hook,
    half_expected,
)
from fuzzdist.properties.comm_hooks.local_sgd import (
    LocalSGDCase,
    check_local_sgd,
    local_sgd_cases,
    local_sgd_reference,
    local_sgd_training,
    synced_after,
)
from fuzzdist.properties.comm_hooks.no_sync import (
    check_no_sync,
    concatenated_gradients,
    no_sync_configs,
    no_sync_training,
)
from fuzzdist.properties.comm_hooks.powersgd import (
    PowerSGDCase,
    check_powersgd,
    compressed_by_powersgd,
    powersgd_cases,
    powersgd_problems,
    powersgd_training,
)
from fuzzdist.properties.comm_hooks.reordered import REORDER_KINDS
from fuzzdist.properties.ddp import completion_schedules

__all__ = [
    "COMPRESSION_HOOKS",
    "CPU_HOOKS",
    "CompressionCase",
    "DTYPES",
    "LocalSGDCase",
    "PowerSGDCase",
    "REORDER_KINDS",
    "SEEDS",
    "Tensors",
    "bf16_wrapped_allreduce_hook",
    "check_compression",
    "check_local_sgd",
    "check_no_sync",
    "check_powersgd",
    "completion_schedules",
    "compressed_by_powersgd",
    "compressed_training",
    "compression_cases",
    "concatenated_gradients",
    "fp16_wrapped_allreduce_hook",
    "half_expected",
    "hook_configs",
    "local_gradients",
    "local_sgd_cases",
    "local_sgd_reference",
    "local_sgd_training",
    "mean_problem",
    "no_sync_configs",
    "no_sync_training",
    "powersgd_cases",
    "powersgd_problems",
    "powersgd_training",
    "synced_after",
]
