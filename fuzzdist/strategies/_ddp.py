"""``DDPConfig``: a DistributedDataParallel training setup (model shape, per-rank
batches, DDP options, optimizer), and ``ddp_configs()``."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st
from torch import nn

from fuzzdist.errors import InvalidArgument, InvalidStrategyArgument
from fuzzdist.strategies._arguments import check_ints
from fuzzdist.strategies._config_repr import NonDefaultRepr
from fuzzdist.strategies._seeds import _generator, mix_seed

OPTIMIZERS: tuple[str, ...] = ("sgd", "adam", "adamw")


def check_model_arguments(
    world_size: int,
    max_depth: int,
    max_width: int,
    max_batch: int,
    max_steps: int,
    optimizers: str | Iterable[str] | None,
) -> tuple[str, ...]:
    """Check the bounds shared by the model strategies (DDP's, FSDP's), early and with a clear error;
    return the optimizer names to draw from, in shrink order."""
    check_ints(
        ("world_size", world_size, 1),
        ("max_depth", max_depth, 1),
        ("max_width", max_width, 1),
        ("max_batch", max_batch, 1),
        ("max_steps", max_steps, 1),
    )
    if optimizers is None:
        return OPTIMIZERS
    names = (optimizers,) if isinstance(optimizers, str) else tuple(optimizers)
    if not names or any(n not in OPTIMIZERS for n in names):
        raise InvalidStrategyArgument(f"optimizers must be a non-empty subset of {OPTIMIZERS}, got {names!r}")
    return tuple(n for n in OPTIMIZERS if n in names)


def draw_widths(draw: st.DrawFn, max_depth: int, max_width: int) -> tuple[int, ...]:
    """An MLP's layer widths, as the model strategies draw them: 1 to ``max_depth`` layers (``depth + 1``
    widths), each width 1 to ``max_width``; shrinks towards ``(1, 1)``."""
    depth = draw(st.integers(1, max_depth))
    return tuple(draw(st.integers(1, max_width)) for _ in range(depth + 1))


def draw_batch_sizes(draw: st.DrawFn, world_size: int, max_batch: int) -> tuple[int, ...]:
    """Per-rank batch sizes, 1 to ``max_batch``, as DDP's and FSDP2's strategies draw them: one size for every
    rank, or (with more than one rank, when drawn) one size each; shrinks towards the even ``(1,) * world_size``."""
    base = draw(st.integers(1, max_batch))
    if world_size > 1 and draw(st.booleans()):
        return tuple(draw(st.integers(1, max_batch)) for _ in range(world_size))
    return (base,) * world_size


# None = DDP's default (25 MiB with a 1 MiB first bucket); the tiny caps put
# every parameter, or a few, in a bucket of its own even for small models.
_BUCKET_CAPS: tuple[float | None, ...] = (None, 25, 1, 1e-3, 1e-5)
_LR = 0.01


@functools.cache
def _ddp_parameters() -> frozenset[str]:
    """Keyword parameters the installed ``DistributedDataParallel`` accepts."""
    try:
        from torch.nn.parallel import DistributedDataParallel
    except Exception:  # noqa: BLE001 - no distributed support in this build
        return frozenset()
    params = inspect.signature(DistributedDataParallel.__init__).parameters
    return frozenset(name for name in params if name not in ("self", "module"))


class _FuzzMLP(nn.Module):
    """The model a ``DDPConfig`` describes (built by ``DDPConfig.build_model``)."""

    running_mean: torch.Tensor  # buffers, when the config has them
    num_batches: torch.Tensor

    def __init__(self, config: DDPConfig) -> None:
        super().__init__()
        widths = config.widths
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:], strict=False))
        self.tied = config.tied_parameters
        if self.tied:
            w = widths[1]
            self.tie_a = nn.Linear(w, w)
            self.tie_b = nn.Linear(w, w, bias=False)
            self.tie_b.weight = self.tie_a.weight  # one Parameter, two modules
        if config.unused_parameters:
            self.unused = nn.Linear(widths[0], 3)  # never called in forward
        self.has_buffers = config.buffers
        if self.has_buffers:
            self.register_buffer("running_mean", torch.zeros(widths[-1]))
            self.register_buffer("num_batches", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layers[0](x)
        if self.tied:
            h = self.tie_b(torch.relu(self.tie_a(h)))
        for layer in self.layers[1:]:
            h = layer(torch.relu(h))
        if self.has_buffers:
            h = h - self.running_mean  # buffers feed the output, like BatchNorm
            if self.training:
                with torch.no_grad():
                    self.running_mean.mul_(0.9).add_(h.detach().mean(0), alpha=0.1)
                    self.num_batches.add_(1)
        return h


@dataclass(frozen=True, repr=False)
class DDPConfig(NonDefaultRepr):
    """A DistributedDataParallel setup, as plain picklable values.

    Model: an MLP with ``len(widths) - 1`` Linear layers (layer i maps
    ``widths[i]`` to ``widths[i + 1]``), optionally with a parameter never
    used in forward (``unused_parameters``), one weight shared by two modules
    that both run (``tied_parameters``) and float/int buffers that feed the
    output and update every training forward (``buffers``).

    Data: ``batch_sizes[r]`` samples on rank r (uneven across ranks allowed),
    ``steps`` training steps with ``optimizer``.

    DDP options: ``bucket_cap_mb`` (None = DDP default),
    ``gradient_as_bucket_view``, ``find_unused_parameters``, ``static_graph``,
    ``init_sync`` and ``broadcast_buffers``; ``ddp_kwargs()`` turns them into
    keyword arguments for the installed DDP. Construction rejects what DDP
    does not support: unused parameters without ``find_unused_parameters`` or
    ``static_graph``, and options the installed DDP lacks.
    """

    always_shown = ("widths", "batch_sizes")

    widths: tuple[int, ...] = (1, 1)
    batch_sizes: tuple[int, ...] = (1,)
    unused_parameters: bool = False
    tied_parameters: bool = False
    buffers: bool = False
    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool = False
    find_unused_parameters: bool = False
    static_graph: bool = False
    init_sync: bool = True
    broadcast_buffers: bool = True
    steps: int = 1
    optimizer: str = "sgd"

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        object.__setattr__(self, "batch_sizes", tuple(int(b) for b in self.batch_sizes))
        if len(self.widths) < 2 or min(self.widths) < 1:
            raise InvalidArgument("widths needs >= 2 entries, all >= 1")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise InvalidArgument("batch_sizes needs one entry >= 1 per rank")
        if self.steps < 1:
            raise InvalidArgument("steps must be >= 1")
        if self.optimizer not in OPTIMIZERS:
            raise InvalidArgument(f"unknown optimizer {self.optimizer!r}; choose from {OPTIMIZERS}")
        if self.bucket_cap_mb is not None and not self.bucket_cap_mb > 0:
            raise InvalidArgument("bucket_cap_mb must be > 0 or None")
        if self.unused_parameters and not (self.find_unused_parameters or self.static_graph):
            raise InvalidArgument(
                "a model with unused parameters needs find_unused_parameters=True or static_graph=True"
            )
        supported = _ddp_parameters()
        for name, value, default in (
            ("bucket_cap_mb", self.bucket_cap_mb, None),
            ("gradient_as_bucket_view", self.gradient_as_bucket_view, False),
            ("find_unused_parameters", self.find_unused_parameters, False),
            ("static_graph", self.static_graph, False),
            ("init_sync", self.init_sync, True),
        ):
            if value != default and name not in supported:
                raise InvalidArgument(f"the installed DistributedDataParallel has no {name!r}")
        if not self.broadcast_buffers and not supported & {"broadcast_buffers", "forward_sync_buffers"}:
            raise InvalidArgument("the installed DistributedDataParallel can't turn off buffer sync")

    @property
    def world_size(self) -> int:
        return len(self.batch_sizes)

    @property
    def depth(self) -> int:
        """Number of Linear layers in the main stack."""
        return len(self.widths) - 1

    @property
    def is_uneven(self) -> bool:
        return len(set(self.batch_sizes)) > 1

    def ddp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``DistributedDataParallel(model, **kwargs)``.

        Only options that differ from DDP's defaults, under the names the
        installed DDP accepts (no ``device_ids``: the worker adds those).
        Turning buffer sync off uses ``forward_sync_buffers=False`` where DDP
        has it (``broadcast_buffers`` is deprecated there; the difference,
        buffers still synced once at init, is invisible here because every
        rank builds identical buffers), else ``broadcast_buffers=False``.
        """
        kwargs: dict[str, Any] = {}
        if self.bucket_cap_mb is not None:
            kwargs["bucket_cap_mb"] = self.bucket_cap_mb
        if self.gradient_as_bucket_view:
            kwargs["gradient_as_bucket_view"] = True
        if self.find_unused_parameters:
            kwargs["find_unused_parameters"] = True
        if self.static_graph:
            kwargs["static_graph"] = True
        if not self.init_sync:
            kwargs["init_sync"] = False
        if not self.broadcast_buffers:
            name = "forward_sync_buffers" if "forward_sync_buffers" in _ddp_parameters() else "broadcast_buffers"
            kwargs[name] = False
        return kwargs

    def build_model(self, seed: int = 0) -> nn.Module:
        """The model, on CPU, identical on every rank for the same seed.

        Parameters are drawn from a CPU generator seeded with ``seed``; the
        global RNG is left exactly as it was.
        """
        with torch.random.fork_rng(devices=[]):
            model = _FuzzMLP(self)
        gen = _generator(mix_seed(seed, 0x6D6F64656C))
        with torch.no_grad():
            for _, param in model.named_parameters():  # shared ones once
                fan_in = param.shape[-1] if param.dim() > 1 else param.numel()
                bound = 1.0 / math.sqrt(max(fan_in, 1))
                param.copy_((torch.rand(param.shape, generator=gen) * 2 - 1) * bound)
        return model

    def make_batch(self, rank: int, step: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) for ``rank`` at ``step``: ``batch_sizes[rank]``
        rows, deterministic in (seed, rank, step), on CPU."""
        if not 0 <= rank < self.world_size:
            raise IndexError(f"rank {rank} out of range for world_size {self.world_size}")
        gen = _generator(mix_seed(seed, rank, step))
        batch = self.batch_sizes[rank]
        inputs = torch.rand((batch, self.widths[0]), generator=gen) * 2 - 1
        targets = torch.rand((batch, self.widths[-1]), generator=gen) * 2 - 1
        return inputs, targets

    def build_optimizer(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """The configured optimizer over ``params``."""
        cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[self.optimizer]
        return cls(params, lr=_LR)


def ddp_configs(
    world_size: int = 2,
    *,
    max_depth: int = 3,
    max_width: int = 16,
    max_batch: int = 8,
    max_steps: int = 3,
    optimizers: None | str | Iterable[str] = None,
) -> st.SearchStrategy[DDPConfig]:
    """DDP setups for ``world_size`` ranks that the installed DDP supports.

    Covers MLPs of 1 to ``max_depth`` layers and widths 1 to ``max_width``,
    with or without unused parameters, tied parameters and buffers; per-rank
    batch sizes, even or uneven; every DDP option the installed
    ``DistributedDataParallel.__init__`` accepts among ``bucket_cap_mb``
    (default, 25, 1 and sub-MiB caps that split even a small model into many
    buckets), ``gradient_as_bucket_view``, ``find_unused_parameters``,
    ``static_graph``, ``init_sync`` and buffer sync (all feature-detected with
    ``inspect.signature``); 1 to ``max_steps`` steps; SGD, Adam or AdamW.
    Unused parameters always come with ``find_unused_parameters=True`` or
    ``static_graph=True``.

    Shrinks towards ``DDPConfig((1, 1), (1,) * world_size)``: a one-layer
    1->1 model, batch size 1 on every rank, no extras, DDP defaults
    (``ddp_kwargs() == {}``), one SGD step.
    """
    optimizer_names = check_model_arguments(world_size, max_depth, max_width, max_batch, max_steps, optimizers)

    supported = _ddp_parameters()

    def option(name: str, default: bool) -> st.SearchStrategy[bool]:
        if name not in supported:
            # the same choice drawn, then ignored: the choice sequence is then the same on every torch, and
            # so are a derandomized search and its shrinking (torch 2.6's DDP has no init_sync; drawing
            # nothing for it, the planted-bug tests' searches there settled in other local minima)
            return st.sampled_from([default, not default]).map(lambda _: default)
        return st.sampled_from([default, not default])

    @st.composite
    def draw_config(draw: st.DrawFn) -> DDPConfig:
        if not supported:
            raise InvalidStrategyArgument("torch.nn.parallel.DistributedDataParallel is not available")
        widths = draw_widths(draw, max_depth, max_width)
        unused = draw(st.booleans())
        tied = draw(st.booleans())
        buffers = draw(st.booleans())
        batch_sizes = draw_batch_sizes(draw, world_size, max_batch)
        caps = _BUCKET_CAPS if "bucket_cap_mb" in supported else (None,)
        bucket_cap_mb = draw(st.sampled_from(caps))
        grad_view = draw(option("gradient_as_bucket_view", False))
        static_graph = draw(option("static_graph", False))
        # drawn even when forced, so forcing never shortens the choice
        # sequence (Hypothesis would then shrink towards unused parameters)
        find_unused = draw(option("find_unused_parameters", False))
        if unused and not static_graph:
            find_unused = True
        init_sync = draw(option("init_sync", True))
        if supported & {"broadcast_buffers", "forward_sync_buffers"}:
            broadcast_buffers = draw(st.sampled_from([True, False]))
        else:
            broadcast_buffers = True
        steps = draw(st.integers(1, max_steps))
        optimizer = draw(st.sampled_from(optimizer_names))
        return DDPConfig(
            widths=widths,
            batch_sizes=batch_sizes,
            unused_parameters=unused,
            tied_parameters=tied,
            buffers=buffers,
            bucket_cap_mb=bucket_cap_mb,
            gradient_as_bucket_view=grad_view,
            find_unused_parameters=find_unused,
            static_graph=static_graph,
            init_sync=init_sync,
            broadcast_buffers=broadcast_buffers,
            steps=steps,
            optimizer=optimizer,
        )

    return draw_config()
