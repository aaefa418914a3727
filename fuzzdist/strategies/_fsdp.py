"""``FSDPConfig``: an FSDP2 (``torch.distributed.fsdp.fully_shard``) training setup (model shape,
per-rank batches, device mesh, ``fully_shard`` options, mixed precision, optimizer), and
``fsdp_configs()``."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st
from torch import nn

from fuzzdist.errors import InvalidArgument, InvalidStrategyArgument
from fuzzdist.strategies._config_repr import NonDefaultRepr
from fuzzdist.strategies._ddp import DDPConfig, check_model_arguments, draw_batch_sizes, draw_widths
from fuzzdist.strategies._ranks import mesh_shapes

# Mixed-precision dtypes drawn, in shrink order (None = no cast, FSDP's default).
PARAM_DTYPES: tuple[torch.dtype | None, ...] = (None, torch.float32, torch.bfloat16, torch.float16)
REDUCE_DTYPES: tuple[torch.dtype | None, ...] = (None, torch.float32, torch.bfloat16, torch.float16)
OUTPUT_DTYPES: tuple[torch.dtype | None, ...] = (None, torch.float32)


@functools.cache
def fully_shard_available() -> bool:
    """Whether the installed torch has FSDP2's ``fully_shard`` (public since torch 2.6)."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: F401
    except ImportError:
        return False
    return True


def reshard_choices(shard_size: int) -> list[bool | int | None]:
    """``reshard_after_forward`` values for a mesh whose shard dim has ``shard_size`` ranks: None
    (FSDP's default: True except on the root), True, False, and the ints ``fully_shard``
    documents, the non-trivial divisors of the shard dim size (excluding 1 and the size itself)."""
    return [None, True, False] + [d for d in range(2, shard_size) if shard_size % d == 0]


@dataclass(frozen=True, repr=False)
class FSDPConfig(NonDefaultRepr):
    """An FSDP2 setup, as plain picklable values.

    Model and data as in :class:`DDPConfig` (an MLP of ``widths``, optionally a parameter never
    used in forward and one weight shared by two modules; ``batch_sizes[r]`` samples on rank r,
    ``steps`` steps of ``optimizer``), without buffers: FSDP does not synchronise buffers, so
    ranks' buffers would diverge by design.

    Sharding: ``mesh_shape`` is ``(W,)`` (FSDP) or ``(replicate, shard)`` (HSDP).  With
    ``per_layer`` every Linear of the stack, the unused module and the tied pair (as one group,
    ``fully_shard([tie_a, tie_b])``: torch requires shared parameters to be in one group) get
    ``fully_shard`` of their own before the root; without, only the root is sharded.
    ``reshard_after_forward`` is passed to every call.  ``param_dtype``, ``reduce_dtype`` and
    ``output_dtype`` make the ``MixedPrecisionPolicy`` (None: FSDP's default, no cast).
    """

    always_shown = ("widths", "batch_sizes", "mesh_shape")

    widths: tuple[int, ...] = (1, 1)
    batch_sizes: tuple[int, ...] = (1,)
    mesh_shape: tuple[int, ...] = (1,)
    unused_parameters: bool = False
    tied_parameters: bool = False
    per_layer: bool = False
    reshard_after_forward: bool | int | None = None
    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    output_dtype: torch.dtype | None = None
    steps: int = 1
    optimizer: str = "sgd"

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        object.__setattr__(self, "batch_sizes", tuple(int(b) for b in self.batch_sizes))
        object.__setattr__(self, "mesh_shape", tuple(int(m) for m in self.mesh_shape))
        world = len(self.batch_sizes)
        if len(self.mesh_shape) not in (1, 2) or min(self.mesh_shape, default=0) < 1:
            raise InvalidArgument(f"mesh_shape must be (W,) or (replicate, shard), got {self.mesh_shape}")
        if world and self.mesh_shape[0] * (self.mesh_shape[1] if len(self.mesh_shape) == 2 else 1) != world:
            raise InvalidArgument(f"mesh_shape {self.mesh_shape} must hold exactly the {world} ranks of batch_sizes")
        raf = self.reshard_after_forward
        if raf is not None and not isinstance(raf, bool) and raf not in reshard_choices(self.shard_size):
            raise InvalidArgument(
                f"reshard_after_forward={raf!r}: an int must be a divisor of the shard dim size "
                f"{self.shard_size} other than 1 and itself; choose from "
                f"{reshard_choices(self.shard_size)}"
            )
        for name, value, allowed in (
            ("param_dtype", self.param_dtype, PARAM_DTYPES),
            ("reduce_dtype", self.reduce_dtype, REDUCE_DTYPES),
            ("output_dtype", self.output_dtype, OUTPUT_DTYPES),
        ):
            if value not in allowed:
                raise InvalidArgument(f"{name}={value!r}; choose from {allowed}")
        self._model_config()  # validates widths, batch_sizes, steps and optimizer

    def _model_config(self) -> DDPConfig:
        # The model and data half of the setup, which DDPConfig already builds (find_unused_parameters
        # only satisfies DDPConfig's own check; no DDP option is used from it).
        return DDPConfig(
            widths=self.widths,
            batch_sizes=self.batch_sizes,
            unused_parameters=self.unused_parameters,
            tied_parameters=self.tied_parameters,
            find_unused_parameters=self.unused_parameters,
            steps=self.steps,
            optimizer=self.optimizer,
        )

    @property
    def world_size(self) -> int:
        return len(self.batch_sizes)

    @property
    def shard_size(self) -> int:
        """Ranks each parameter is sharded over (the mesh's last dim)."""
        return self.mesh_shape[-1]

    @property
    def depth(self) -> int:
        """Number of Linear layers in the main stack."""
        return len(self.widths) - 1

    @property
    def is_hsdp(self) -> bool:
        return len(self.mesh_shape) == 2

    @property
    def is_uneven(self) -> bool:
        return len(set(self.batch_sizes)) > 1

    @property
    def mixed_precision(self) -> bool:
        return (self.param_dtype, self.reduce_dtype, self.output_dtype) != (None, None, None)

    def mp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``MixedPrecisionPolicy``: only those that differ from its defaults."""
        return {
            name: value
            for name, value in (
                ("param_dtype", self.param_dtype),
                ("reduce_dtype", self.reduce_dtype),
                ("output_dtype", self.output_dtype),
            )
            if value is not None
        }

    def build_model(self, seed: int = 0) -> nn.Module:
        """The model, on CPU, identical on every rank for the same seed (see ``DDPConfig.build_model``)."""
        return self._model_config().build_model(seed)

    def make_batch(self, rank: int, step: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) for ``rank`` at ``step`` (see ``DDPConfig.make_batch``)."""
        return self._model_config().make_batch(rank, step, seed)

    def build_optimizer(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """The configured optimizer over ``params``."""
        return self._model_config().build_optimizer(params)

    def shard_groups(self, model: nn.Module) -> list[nn.Module | list[nn.Module]]:
        """What ``fully_shard`` is called on, bottom-up, before the root: each Linear of the stack,
        the tied pair as one group and the unused module (``per_layer``), or nothing."""
        if not self.per_layer:
            return []
        groups: list[nn.Module | list[nn.Module]] = list(model.layers)  # type: ignore[arg-type]
        if self.tied_parameters:
            groups.append([model.tie_a, model.tie_b])  # type: ignore[list-item]
        if self.unused_parameters:
            groups.append(model.unused)  # type: ignore[arg-type]
        return groups


def fsdp_configs(
    world_size: int = 2,
    *,
    max_depth: int = 3,
    max_width: int = 16,
    max_batch: int = 8,
    max_steps: int = 3,
    mixed_precision: bool = True,
    optimizers: None | str | Iterable[str] = None,
) -> st.SearchStrategy[FSDPConfig]:
    """FSDP2 setups for ``world_size`` ranks.

    Covers MLPs of 1 to ``max_depth`` layers and widths 1 to ``max_width`` (so parameters whose
    dim 0 the shard size does not divide, and ranks with empty shards), with or without an unused
    parameter and a shared weight; per-rank batch sizes, even or uneven; every mesh of
    :func:`mesh_shapes` (1-D, and 2-D HSDP including size-1 dims); root-only or per-layer
    ``fully_shard``; every ``reshard_after_forward`` of :func:`reshard_choices`; with
    ``mixed_precision``, ``param_dtype`` and ``reduce_dtype`` among None, float32, bfloat16 and
    float16 and ``output_dtype`` None or float32 (only with a ``param_dtype``: without one, a
    per-layer output cast would hand the next layer inputs of another dtype than its parameters,
    a usage error); 1 to ``max_steps`` steps of SGD, Adam or AdamW.

    Left out: ``cast_forward_inputs=False`` (its contract makes the caller cast the inputs, which
    this model does not), CPU offloading (``CPUOffloadPolicy``: it moves parameters between a
    device and the host, and the ranks here have no device), buffers (FSDP does not sync them).

    Shrinks towards ``FSDPConfig((1, 1), (1,) * world_size, (world_size,))``: one 1->1 layer,
    batch 1 on every rank, the 1-D mesh, root-only sharding, FSDP's defaults, one SGD step.
    """
    optimizer_names = check_model_arguments(world_size, max_depth, max_width, max_batch, max_steps, optimizers)
    none: tuple[torch.dtype | None, ...] = (None,)

    @st.composite
    def draw_config(draw: st.DrawFn) -> FSDPConfig:
        if not fully_shard_available():
            raise InvalidStrategyArgument(f"torch {torch.__version__} has no torch.distributed.fsdp.fully_shard")
        widths = draw_widths(draw, max_depth, max_width)
        unused = draw(st.booleans())
        tied = draw(st.booleans())
        batch_sizes = draw_batch_sizes(draw, world_size, max_batch)
        mesh_shape = draw(st.sampled_from(mesh_shapes(world_size)))
        per_layer = draw(st.booleans())
        reshard = draw(st.sampled_from(reshard_choices(mesh_shape[-1])))
        param_dtype = draw(st.sampled_from(PARAM_DTYPES if mixed_precision else none))
        reduce_dtype = draw(st.sampled_from(REDUCE_DTYPES if mixed_precision else none))
        # drawn even when forced, so forcing never shortens the choice sequence
        output_dtype = draw(st.sampled_from(OUTPUT_DTYPES if mixed_precision else none))
        if param_dtype is None:
            output_dtype = None
        steps = draw(st.integers(1, max_steps))
        optimizer = draw(st.sampled_from(optimizer_names))
        return FSDPConfig(
            widths=widths,
            batch_sizes=batch_sizes,
            mesh_shape=mesh_shape,
            unused_parameters=unused,
            tied_parameters=tied,
            per_layer=per_layer,
            reshard_after_forward=reshard,
            param_dtype=param_dtype,
            reduce_dtype=reduce_dtype,
            output_dtype=output_dtype,
            steps=steps,
            optimizer=optimizer,
        )

    return draw_config()
