"""``FSDP1Config``: a ``FullyShardedDataParallel`` (FSDP1) training setup as plain picklable values, and
``fsdp1_configs()``, the strategy that draws it.

The model and data are :class:`~fuzzdist.strategies.FSDPConfig`'s (an MLP of drawn widths, per-rank
batches, SGD/Adam/AdamW); the rest are FSDP1's constructor arguments and how the loop uses them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from hypothesis import strategies as st
from torch import nn

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.strategies import NonDefaultRepr, check_model_arguments

SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
"""``ShardingStrategy`` members drawn, in shrink order."""
BACKWARD_PREFETCH = (None, "BACKWARD_PRE", "BACKWARD_POST")
"""``backward_prefetch`` values drawn (None: no prefetch), in shrink order."""
STATE_DICT_TYPES = ("FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT")
"""``StateDictType`` members the round trip saves with, in shrink order."""
# Mixed-precision dtypes drawn, in shrink order (None: FSDP's default, no cast).
MP_DTYPES: tuple[torch.dtype | None, ...] = (None, torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True, repr=False)
class FSDP1Config(NonDefaultRepr):
    """An FSDP1 setup.

    ``widths``, ``batch_sizes``, ``steps`` and ``optimizer`` as in ``FSDPConfig`` (no tied weight,
    no unused parameter, no buffer).  ``sharding_strategy`` names a ``ShardingStrategy``;
    ``HYBRID_SHARD`` runs on the 2-D ``hybrid_mesh`` (replicate, shard).  ``auto_wrap`` wraps every
    ``nn.Linear`` in an FSDP instance of its own (``ModuleWrapPolicy({nn.Linear})``) under the root.
    ``param_dtype``/``reduce_dtype`` make the ``MixedPrecision``.  ``no_sync``: every step is two
    micro-batches, the first's backward inside the root's ``no_sync()``.
    ``state_dict_type``: after the steps, the model and optimizer state are saved with it and loaded
    into a fresh FSDP model, which then trains one more step next to the original.
    """

    always_shown = ("widths", "batch_sizes")

    widths: tuple[int, ...] = (1, 1)
    batch_sizes: tuple[int, ...] = (1,)
    sharding_strategy: str = "FULL_SHARD"
    hybrid_mesh: tuple[int, int] | None = None
    use_orig_params: bool = False
    auto_wrap: bool = False
    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    backward_prefetch: str | None = None
    forward_prefetch: bool = False
    no_sync: bool = False
    state_dict_type: str = "FULL_STATE_DICT"
    steps: int = 1
    optimizer: str = "sgd"

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        object.__setattr__(self, "batch_sizes", tuple(int(b) for b in self.batch_sizes))
        for name, value, allowed in (
            ("sharding_strategy", self.sharding_strategy, SHARDING_STRATEGIES),
            ("backward_prefetch", self.backward_prefetch, BACKWARD_PREFETCH),
            ("state_dict_type", self.state_dict_type, STATE_DICT_TYPES),
            ("param_dtype", self.param_dtype, MP_DTYPES),
            ("reduce_dtype", self.reduce_dtype, MP_DTYPES),
        ):
            if value not in allowed:
                raise InvalidArgument(f"{name}={value!r}; choose from {allowed}")
        hybrid = self.sharding_strategy == "HYBRID_SHARD"
        if hybrid != (self.hybrid_mesh is not None):
            raise InvalidArgument(
                "hybrid_mesh (replicate, shard) is given exactly when sharding_strategy is "
                f"HYBRID_SHARD; got {self.sharding_strategy} with hybrid_mesh={self.hybrid_mesh}"
            )
        if self.hybrid_mesh is not None:
            mesh = tuple(int(m) for m in self.hybrid_mesh)
            if len(mesh) != 2 or mesh[0] * mesh[1] != self.world_size:
                raise InvalidArgument(
                    f"hybrid_mesh {self.hybrid_mesh} must be (replicate, shard) over the "
                    f"{self.world_size} ranks of batch_sizes"
                )
            object.__setattr__(self, "hybrid_mesh", mesh)
        self.reference_config()  # validates widths, batch_sizes, steps and optimizer

    @property
    def world_size(self) -> int:
        return len(self.batch_sizes)

    @property
    def mixed_precision(self) -> bool:
        return (self.param_dtype, self.reduce_dtype) != (None, None)

    def reference_config(self) -> fst.FSDPConfig:
        """The FSDP2 config that computes the same way, for the local reference: its
        ``compute_model`` casts parameters and each FSDP unit's inputs to ``param_dtype``, as FSDP1
        does (the root casts its inputs; inner units' inputs are already in ``param_dtype``)."""
        return fst.FSDPConfig(
            widths=self.widths,
            batch_sizes=self.batch_sizes,
            mesh_shape=(self.world_size,),
            per_layer=self.auto_wrap,
            param_dtype=self.param_dtype,
            reduce_dtype=self.reduce_dtype,
            steps=self.steps,
            optimizer=self.optimizer,
        )

    def build_model(self, seed: int = 0) -> nn.Module:
        """The model, on CPU, identical on every rank for the same seed."""
        return self.reference_config().build_model(seed)

    def make_batch(self, rank: int, step: int, micro: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) for ``rank`` at ``step``'s micro-batch ``micro`` (0, or 0 and 1 with ``no_sync``)."""
        return self.reference_config().make_batch(rank, 2 * step + micro, seed)

    def build_optimizer(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """The configured optimizer over ``params``."""
        return self.reference_config().build_optimizer(params)

    @property
    def micro_batches(self) -> int:
        return 2 if self.no_sync else 1


def fsdp1_configs(
    world_size: int = 2,
    *,
    max_depth: int = 3,
    max_width: int = 12,
    max_batch: int = 6,
    max_steps: int = 3,
    mixed_precision: bool = True,
) -> st.SearchStrategy[FSDP1Config]:
    """FSDP1 setups for ``world_size`` ranks: MLPs of 1 to ``max_depth`` layers of widths 1 to
    ``max_width`` (so flat parameters the world size does not divide), even or uneven batches, every
    ``ShardingStrategy`` (``HYBRID_SHARD`` on every 2-D mesh of the world), ``use_orig_params``,
    per-Linear auto-wrap or the root alone, ``MixedPrecision`` param and reduce dtypes (None,
    float32, bfloat16, float16), ``backward_prefetch``, ``forward_prefetch``, ``sync_module_states``,
    ``CPUOffload(offload_params=True)``, ``no_sync`` micro-batches, a state-dict type, and 1 to
    ``max_steps`` steps of SGD, Adam or AdamW.

    Left out, because torch 2.13 refuses them on CPU ranks: ``sync_module_states=True`` (FSDP1 raises
    "The module has CPU parameters or buffers when `sync_module_states=True`, which requires them to be
    on GPU", also with ``device_id=torch.device("cpu")``) and ``CPUOffload(offload_params=True)`` (its
    lazy init pins the local shard's memory, which raises "Cannot access accelerator device when none
    is available" without an accelerator).

    Shrinks towards one 1->1 layer, batch 1, ``FULL_SHARD`` with FSDP's defaults, one SGD step and a
    ``FULL_STATE_DICT`` round trip.
    """
    optimizer_names = check_model_arguments(world_size, max_depth, max_width, max_batch, max_steps, None)
    # every (replicate, shard) factorisation of the world, shard groups of one rank included
    hybrid_meshes = [(r, world_size // r) for r in range(1, world_size + 1) if world_size % r == 0]

    @st.composite
    def draw_config(draw: st.DrawFn) -> FSDP1Config:
        depth = draw(st.integers(1, max_depth))
        widths = tuple(draw(st.integers(1, max_width)) for _ in range(depth + 1))
        if world_size > 1 and draw(st.booleans()):
            batch_sizes = tuple(draw(st.integers(1, max_batch)) for _ in range(world_size))
        else:
            batch_sizes = (draw(st.integers(1, max_batch)),) * world_size
        strategy = draw(st.sampled_from(SHARDING_STRATEGIES))
        hybrid_mesh = draw(st.sampled_from(hybrid_meshes)) if strategy == "HYBRID_SHARD" else None
        none: tuple[torch.dtype | None, ...] = (None,)
        return FSDP1Config(
            widths=widths,
            batch_sizes=batch_sizes,
            sharding_strategy=strategy,
            hybrid_mesh=hybrid_mesh,
            use_orig_params=draw(st.booleans()),
            auto_wrap=draw(st.booleans()),
            param_dtype=draw(st.sampled_from(MP_DTYPES if mixed_precision else none)),
            reduce_dtype=draw(st.sampled_from(MP_DTYPES if mixed_precision else none)),
            backward_prefetch=draw(st.sampled_from(BACKWARD_PREFETCH)),
            forward_prefetch=draw(st.booleans()),
            no_sync=draw(st.booleans()),
            state_dict_type=draw(st.sampled_from(STATE_DICT_TYPES)),
            steps=draw(st.integers(1, max_steps)),
            optimizer=draw(st.sampled_from(optimizer_names)),
        )

    return draw_config()
