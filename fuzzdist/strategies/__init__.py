"""Hypothesis strategies for what breaks torch.distributed code.

Every strategy runs in the driver and yields small picklable values (plain
values, ``torch.dtype`` objects and frozen dataclasses of them) that travel
to the rank processes by pickle. Large tensors are never drawn: a
``TensorSpec`` is, and every rank builds the same tensor from it with
``spec.materialize(device, seed)``.

Strategies and what they shrink to:

* ``shapes()``: tensor shapes under a byte budget -> ``(1,)``
* ``dtypes()``: dtypes usable on a device -> ``torch.float32``
* ``tensor_specs()``: ``TensorSpec`` -> ``TensorSpec((1,), torch.float32)``
* ``seeds()``: integers in ``[0, 2**32 - 1]`` that the ranks build an example's values
  from -> 0 (``mix_seed(seed, ...)`` derives sub-seeds, the same in every process)
* ``world_sizes()``: -> 1 (``min_size``)
* ``source_ranks(world_size)``: -> 0
* ``rank_subsets(world_size)``: -> ``(0,)``
* ``allocator_modes(device)``: -> ``SharingStrategyMode("file_descriptor")``
  on CPU, ``CudaAllocatorMode()`` (no change) on CUDA
* ``completion_orders(n)``: ``CompletionOrder`` -> in-order completion
* ``ddp_configs(world_size)``: ``DDPConfig`` -> one 1->1 layer, batch 1 on
  every rank, DDP defaults, one SGD step
* ``fsdp_configs(world_size)``: ``FSDPConfig`` -> one 1->1 layer, batch 1 on
  every rank, the 1-D mesh, root-only ``fully_shard`` with its defaults, one
  SGD step

Modules: ``_shapes.py``, ``_dtypes.py`` (over ``_dtype_catalogue.py``, every dtype fuzzdist knows, and
``_dtype_probe.py``, which ones a device holds, asking its child program ``_dtype_probe_child.py``),
``_tensors.py`` (``TensorSpec``), ``_tensor_specs.py``,
``_seeds.py``, ``_ranks.py``, ``_allocator.py``, ``_completion.py``, ``_ddp.py``, ``_fsdp.py``,
``_arguments.py`` (the argument checks they share) and ``_config_repr.py`` (the short repr of a drawn setup).

For strategies written elsewhere (a property family's own cases), the same pieces: ``check_ints`` (whole-number
arguments), ``check_model_arguments`` (a model strategy's bounds and optimizers) and ``NonDefaultRepr`` (the
short repr of a setup dataclass).
"""

from fuzzdist.strategies._allocator import (
    AllocatorMode,
    CudaAllocatorMode,
    SharingStrategyMode,
    allocator_modes,
    inherited_allocator_settings,
)
from fuzzdist.strategies._arguments import check_ints
from fuzzdist.strategies._completion import CompletionOrder, completion_orders
from fuzzdist.strategies._config_repr import NonDefaultRepr
from fuzzdist.strategies._ddp import DDPConfig, check_model_arguments, ddp_configs
from fuzzdist.strategies._dtype_catalogue import DTYPE_KINDS
from fuzzdist.strategies._dtypes import dtypes, supported_dtypes
from fuzzdist.strategies._fsdp import FSDPConfig, fsdp_configs
from fuzzdist.strategies._ranks import mesh_shapes, rank_subsets, source_ranks, world_sizes
from fuzzdist.strategies._seeds import mix_seed, mix_seed_fnv, seeds
from fuzzdist.strategies._shapes import shapes
from fuzzdist.strategies._tensor_specs import tensor_specs
from fuzzdist.strategies._tensors import LAYOUTS, PATTERNS, TensorSpec

__all__ = [
    "DTYPE_KINDS",
    "LAYOUTS",
    "PATTERNS",
    "AllocatorMode",
    "CompletionOrder",
    "CudaAllocatorMode",
    "DDPConfig",
    "FSDPConfig",
    "NonDefaultRepr",
    "SharingStrategyMode",
    "TensorSpec",
    "allocator_modes",
    "check_ints",
    "check_model_arguments",
    "completion_orders",
    "ddp_configs",
    "dtypes",
    "fsdp_configs",
    "inherited_allocator_settings",
    "mesh_shapes",
    "mix_seed",
    "mix_seed_fnv",
    "rank_subsets",
    "seeds",
    "shapes",
    "source_ranks",
    "supported_dtypes",
    "tensor_specs",
    "world_sizes",
]
