"""Tensor parallelism: ``parallelize_module`` with Colwise/Rowwise/Sequence plans computes what the
unparallelised model computes.

For any model ``tp_configs`` draws (a stack of ``nn.Linear`` layers, each planned ``ColwiseParallel``
or ``RowwiseParallel``, and ``nn.LayerNorm`` layers planned ``SequenceParallel``, ``tanh`` after each
Linear but the last), parallelised with ``parallelize_module`` over a 1-D CPU ``DeviceMesh`` of
every rank (gloo), on a 3-D input ``(batch, seq, features)`` handed to the first layer replicated or
as each rank's shard, and the loss ``sum(output * C)`` for a drawn coefficient tensor ``C``:

* after ``parallelize_module``, every parameter is a DTensor with the placement the style documents
  (Colwise Linear: weight and bias ``Shard(0)``; Rowwise Linear: weight ``Shard(1)``, bias
  ``Replicate()``; Sequence: ``Replicate()``) and each rank's local piece is, bitwise, its
  ``torch.chunk`` piece of the source rank's parameter (``src_data_rank``, see below);
* the output has the layout the last style's ``output_layouts`` asks for (DTensor or, with
  ``use_local_output``, its local tensor), and each rank's local output is its piece of the
  reference's output;
* every parameter gradient's value (``grad.full_tensor()``: a Replicate parameter's gradient may be
  ``Partial``, a pending sum, which is a valid DTensor of the same value) equals the reference's,
  and where the gradient has the parameter's own placement, each rank's local piece is its piece of
  the reference gradient;
* after one SGD step on both, each rank's local parameters are their pieces of the reference's.

The reference is the same model, built from the same seed on every rank, run on the whole input
with no communication and never handed to torch.distributed.

What the docs promise, and what is read where they are silent:

* ``ColwiseParallel``: "input_layouts ... If not specified, we assume the input tensor to be
  replicated"; "output_layouts ... If not specified, the output tensor is sharded on the last
  dimension"; ``RowwiseParallel``: input "sharded on the last dimension", output "replicated" by
  default; ``use_local_output``: "Whether to use local torch.Tensor instead of DTensor for the
  module output, default: True".  ``SequenceParallel``: "If the input passed in to this nn.Module is
  a torch.Tensor, it assumes that the input is already sharded on the sequence dimension ... If
  [it] is already a DTensor but is not sharded on the sequence dimension, it would redistribute";
  "The output of the nn.Module will be sharded on the sequence dimension"; ``use_local_output``
  default False.  ``sequence_dim`` is drawn 1 or 0; that one dim is the "T" layout throughout.
* Layouts drawn: ``Replicate()``, ``Shard(sequence_dim)`` and ``Shard(-1)`` for every
  ``input_layouts``/``output_layouts``; ``None`` (the default) where the layout equals it.
  ``input_layouts`` always says the layout the input really has: the docs call it an annotation of
  the input, so a wrong one is a user error, not drawn.  ``Partial()`` is not drawn: a partial
  output is a pending reduction, not an activation the next layer or a loss can take.
* Divisibility, where the docs require it.  ``parallelize_module`` turns a local ``torch.Tensor``
  input into a DTensor with ``DTensor.from_local``, whose docstring says: "shape ... If not
  provided, shape will be computed assuming the given distributed tensor is evenly sharded across
  ranks".  So a *local* sharded tensor handed to a style (the model's input, or a layer's output
  with ``use_local_output=True`` fed to the next layer) is drawn only with its sharded dim
  divisible by the world size.  DTensor activations (``use_local_output=False``) carry their global
  shape: they are drawn with uneven shards too, and so are the last layer's local outputs (compared
  piecewise, never converted back), the weights (``distribute_tensor`` shards unevenly) and every
  other width.
* ``src_data_rank``: "the rank of the source data ... used by distribute_tensor to scatter/broadcast
  the shards/replicas"; ``None``: "simply uses its local data".  Drawn 0..W-1 or None; every rank
  but the source builds its Linear layers from another seed (a decoy, which must not show up), and
  with None every rank builds the true model.  LayerNorm parameters are the true ones on every rank:
  ``SequenceParallel`` does not broadcast them ("If you have custom inits for the weights ... you
  need to broadcast the weights"), so it is handed replicated ones.
* Only ``nn.Linear`` (``nn.Embedding`` takes integer inputs) and ``nn.LayerNorm`` (not ``Dropout``:
  random) are drawn; plans are dicts of exact FQNs (``"layers.0"``).

Tolerance.  The parallel model computes what the reference computes, in float64 (the only dtype
drawn, so that rounding stays far below any real error), except that some sums are split across
ranks and added in another order: Rowwise forward (over the input features), Colwise backward (over
the output features), weight and LayerNorm-parameter gradients over tokens.  Each such sum of at
most m = 32 terms differs from the reference's by at most 2m eps64 = 7e-15 of its terms'
magnitudes; values are O(1) (inputs and ``C`` in [-1, 1), weights within 1/sqrt(fan_in), tanh
1-Lipschitz, LayerNorm weights in [0.5, 1.5)) and at most 2 LayerNorms (each amplifying by at most
1.5 / sqrt(eps = 1e-5) < 475) lie on any path, so differences stay below 7e-15 * 475**2 * 8 (width
gain) = 1.3e-8.  Values and gradients are compared with ``torch.testing.assert_close``'s float64
defaults, rtol = atol = 1e-7; parameters after ``parallelize_module`` bitwise (data movement only).

Generalises torch's TP tests (``test_parallelize_api.py``/``test_tp_style.py``: fixed MLPs on
GPU ranks, mostly even shapes) to drawn depths, widths, layouts, local/DTensor outputs, sequence
dims and source ranks on CPU.  The implementation under test is ``check(..., parallelize=...)``:
any function with ``parallelize_module``'s signature.  Importing this module raises ImportError
where torch has no ``torch.distributed.tensor.parallel``.

Modules: ``known_bugs.py``, the torch bugs this family meets (listed in :mod:`fuzzdist.known_bugs.entries`).
"""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st
from torch import nn

from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties import dtensor as _dtensor
from fuzzdist.strategies import seeds
from fuzzdist.toolkit.checks import first_difference
from fuzzdist.toolkit.reporting import capped

try:
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        ParallelStyle,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )
except ImportError as exc:  # pragma: no cover - torch < 2.4
    raise ImportError(f"torch {torch.__version__} has no torch.distributed.tensor.parallel") from exc

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.placement_types import Placement

    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

SEEDS = seeds()
DTYPE = torch.float64
RTOL, ATOL = 1e-7, 1e-7  # torch.testing.assert_close's float64 defaults (derivation: module docstring)
LR = 0.1
MAX_NORMS = 2  # LayerNorms per model: each may amplify rounding differences up to ~475x
HAS_SRC_DATA_RANK = "src_data_rank" in inspect.signature(parallelize_module).parameters
KINDS = ("colwise", "rowwise", "sequence")
LAYOUTS = ("R", "T", "H")  # Replicate(), Shard(sequence_dim), Shard(-1)
_DEFAULT_IN = {"colwise": "R", "rowwise": "H"}
_DEFAULT_OUT = {"colwise": "H", "rowwise": "R", "sequence": "T"}
SGD_STEP = "the SGD step on the parallelised parameters"  # what a problem of the optimizer's step is about


@dataclass(frozen=True)
class TPLayer:
    """One layer and its plan.  ``kind``: ``"colwise"``/``"rowwise"`` (an ``nn.Linear`` to
    ``out_features``, with ``bias``) or ``"sequence"`` (an ``nn.LayerNorm`` over the features,
    ``out_features`` is its width).  ``input_layout``/``output_layout``: ``None`` (the style's
    default) or ``"R"``/``"T"``/``"H"``; ``use_local_output``: ``None`` for the style's default."""

    kind: str
    out_features: int
    input_layout: str | None = None
    output_layout: str | None = None
    use_local_output: bool | None = None
    bias: bool = True

    def style(self, sequence_dim: int) -> ParallelStyle:
        """The ParallelStyle this layer is planned with (only the options that differ from the defaults)."""
        kwargs: dict[str, Any] = {}
        if self.use_local_output is not None:
            kwargs["use_local_output"] = self.use_local_output
        if self.kind == "sequence":
            if sequence_dim != 1:
                kwargs["sequence_dim"] = sequence_dim
            return SequenceParallel(**kwargs)
        if self.input_layout is not None:
            kwargs["input_layouts"] = placement(self.input_layout, sequence_dim)
        if self.output_layout is not None:
            kwargs["output_layouts"] = placement(self.output_layout, sequence_dim)
        return (ColwiseParallel if self.kind == "colwise" else RowwiseParallel)(**kwargs)

    @property
    def out_layout(self) -> str:
        """The layout of this layer's output."""
        return self.output_layout or _DEFAULT_OUT[self.kind]

    @property
    def local_output(self) -> bool:
        """Whether this layer returns a local torch.Tensor (else a DTensor)."""
        if self.use_local_output is not None:
            return self.use_local_output
        return self.kind != "sequence"


@dataclass(frozen=True)
class TPConfig:
    """One example: the input ``(batch, seq, in_features)`` handed in ``input_layout`` (a local
    tensor: the whole input for ``"R"``, else this rank's piece), the layers, the token dim the
    ``"T"`` layout shards (``sequence_dim``), ``src_data_rank``, and the world size."""

    world_size: int
    batch: int
    seq: int
    in_features: int
    layers: tuple[TPLayer, ...]
    input_layout: str = "R"
    sequence_dim: int = 1
    src_data_rank: int | None = 0

    def __post_init__(self) -> None:
        if not self.layers:
            raise InvalidArgument("a TPConfig needs at least one layer")
        if self.sequence_dim not in (0, 1):
            raise InvalidArgument(f"sequence_dim must be 0 or 1, got {self.sequence_dim}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """The whole input's shape."""
        return (self.batch, self.seq, self.in_features)

    def plan(self) -> dict[str, ParallelStyle]:
        """The ``parallelize_plan``: each layer's FQN to its style."""
        return {f"layers.{i}": layer.style(self.sequence_dim) for i, layer in enumerate(self.layers)}

    def build_model(self, seed: int, linear_seed: int | None = None) -> nn.Module:
        """The model on CPU in float64; Linear parameters from ``linear_seed`` (default ``seed``), LayerNorm
        ones from ``seed``.  The global RNG is left alone."""
        return TPModel(self, seed, seed if linear_seed is None else linear_seed)

    def output_shape(self) -> tuple[int, int, int]:
        """The model output's shape."""
        return (self.batch, self.seq, self.layers[-1].out_features)

    def inputs(self, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(the whole input, the loss coefficients C), identical on every rank."""
        gen = _generator(seed, 1)
        x = torch.rand(self.shape, generator=gen, dtype=DTYPE) * 2 - 1
        c = torch.rand(self.output_shape(), generator=gen, dtype=DTYPE) * 2 - 1
        return x, c


def _generator(seed: int, *salt: int) -> torch.Generator:
    text = ",".join(str(int(p)) for p in (seed, *salt)).encode()
    gen = torch.Generator()
    gen.manual_seed(int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "little"))
    return gen


class TPModel(nn.Module):
    """The model a :class:`TPConfig` describes: ``layers`` in order, ``tanh`` after every Linear but the last."""

    def __init__(self, config: TPConfig, seed: int, linear_seed: int) -> None:
        super().__init__()
        width = config.in_features
        layers: list[nn.Module] = []
        self.linear = []
        for layer in config.layers:
            if layer.kind == "sequence":
                layers.append(nn.LayerNorm(width, dtype=DTYPE))
                self.linear.append(False)
            else:
                layers.append(nn.Linear(width, layer.out_features, bias=layer.bias, dtype=DTYPE))
                self.linear.append(True)
                width = layer.out_features
        self.layers = nn.ModuleList(layers)
        self.last_linear = max((i for i, lin in enumerate(self.linear) if lin), default=-1)
        with torch.no_grad():
            for i, module in enumerate(self.layers):
                if self.linear[i]:
                    gen = _generator(linear_seed, 2, i)
                    assert isinstance(module, nn.Linear)
                    for p in module.parameters():
                        bound = 1.0 / math.sqrt(max(module.in_features, 1))
                        p.copy_((torch.rand(p.shape, generator=gen, dtype=DTYPE) * 2 - 1) * bound)
                else:
                    gen = _generator(seed, 3, i)
                    assert isinstance(module, nn.LayerNorm)
                    module.weight.copy_(torch.rand(module.weight.shape, generator=gen, dtype=DTYPE) + 0.5)
                    module.bias.copy_(torch.rand(module.bias.shape, generator=gen, dtype=DTYPE) - 0.5)

    def forward(self, x: Any) -> Any:
        """The layers in order; tanh after each Linear but the last."""
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if self.linear[i] and i != self.last_linear:
                x = torch.tanh(x)
        return x


# ---------------------------------------------------------------------------
# layouts and pieces


def placement(layout: str, sequence_dim: int) -> Placement:
    """The placement a layout name stands for: R Replicate(), T Shard(sequence_dim), H Shard(-1)."""
    if layout == "R":
        return Replicate()
    return Shard(sequence_dim if layout == "T" else -1)


def piece(full: torch.Tensor, placements: tuple[Any, ...], rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s piece of ``full`` on the 1-D mesh: ``torch.chunk`` semantics for Shard (the last
    pieces shorter or empty), the whole tensor for Replicate."""
    (p,) = placements
    if not isinstance(p, Shard):
        return full
    d = p.dim % full.ndim
    size = full.size(d)
    chunk = -(-size // world)
    start = min(rank * chunk, size)
    return full.narrow(d, start, min(start + chunk, size) - start)


def _param_placement(kind: str, name: str) -> tuple[Any, ...]:
    """The placement the style documents for a parameter (``name``: weight or bias)."""
    if kind == "colwise":
        return (Shard(0),)
    if kind == "rowwise":
        return (Shard(1),) if name == "weight" else (Replicate(),)
    return (Replicate(),)


def _close(what: str, actual: torch.Tensor, expected: torch.Tensor, rank: int | None = None) -> Problem | None:
    """None if ``actual`` is within rtol/atol of ``expected``, else the worst difference (on ``rank``)."""
    if tuple(actual.shape) != tuple(expected.shape) or actual.dtype != expected.dtype:
        return Problem(
            Kind.SHAPE,
            what,
            rank=rank,
            got=(tuple(actual.shape), str(actual.dtype)),
            expected=(tuple(expected.shape), str(expected.dtype)),
        )
    close = torch.isclose(actual, expected, rtol=RTOL, atol=ATOL)
    if bool(close.all()):
        return None
    error = (actual - expected).abs().reshape(-1).nan_to_num(nan=math.inf)
    i = int(torch.where((~close).reshape(-1), error, -1.0).argmax())
    return Problem(
        Kind.MISMATCH,
        what,
        rank=rank,
        index=i,
        got=actual.reshape(-1)[i].item(),
        expected=expected.reshape(-1)[i].item(),
        bound=ATOL + RTOL * abs(expected.reshape(-1)[i].item()),
        count=int((~close).sum()),
        size=actual.numel(),
        worst=True,
    )


# ---------------------------------------------------------------------------
# on the ranks


def _parallelize(
    module: nn.Module, device_mesh: DeviceMesh, parallelize_plan: dict[str, ParallelStyle], **kwargs: Any
) -> nn.Module:
    return parallelize_module(module, device_mesh, parallelize_plan, **kwargs)


def _any_rank(ctx: RankContext, stop: bool) -> bool:
    """Whether ``stop`` holds on any rank.  Every rank asks at the same points of the example, so the
    ranks stop checking together: a rank that returned alone would leave the others waiting in the
    model's next collective (a hang instead of the problem it found)."""
    flag = torch.tensor([int(stop)], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=ctx.group)
    return bool(flag.item())


def tp_parity(
    ctx: RankContext, config: TPConfig, seed: int, parallelize: Callable[..., nn.Module] = _parallelize
) -> list[Problem]:
    """On every rank: parallelise ``config``'s model with ``parallelize`` (``parallelize_module``'s
    signature), run it forward and backward and one SGD step next to the local reference; return
    the problems (empty if none)."""
    world, rank = ctx.world_size, ctx.rank
    if config.world_size != world:
        raise InvalidArgument(
            f"the config is for {config.world_size} ranks; this pool has {world}: draw it with tp_configs({world})"
        )
    mesh = _dtensor.device_mesh(ctx.device.type, (world,))
    reference = config.build_model(seed)
    src = config.src_data_rank
    decoy = src is not None and rank != src
    model = config.build_model(seed, linear_seed=seed + 2**33 if decoy else seed)
    kwargs = {"src_data_rank": src} if HAS_SRC_DATA_RANK else {}
    problems: list[Problem] = []
    model = parallelize(model, mesh, config.plan(), **kwargs)
    ref_params = dict(reference.named_parameters())
    params: dict[str, Any] = dict(model.named_parameters())  # DTensor parameters after parallelize_module
    if sorted(params) != sorted(ref_params):
        return [Problem(Kind.MISMATCH, "parameter names", got=sorted(params), expected=sorted(ref_params))]
    kinds = {name: config.layers[int(name.split(".")[1])].kind for name in params}
    for name, p in params.items():
        expected = _param_placement(kinds[name], name.rsplit(".", 1)[1])
        if not isinstance(p, DTensor) or tuple(p.placements) != expected:
            got = tuple(p.placements) if isinstance(p, DTensor) else type(p).__name__
            problems.append(Problem(Kind.SHAPE, f"after parallelize: {name}'s placements", got=got, expected=expected))
            continue
        diff = first_difference(p.to_local(), piece(ref_params[name].detach(), expected, rank, world))
        if diff is not None:
            problems.append(diff.about(f"after parallelize: {name}'s local piece", rank=rank))
    if _any_rank(ctx, bool(problems)):  # stop together: a rank leaving alone strands the others in a collective
        return problems

    x, coef = config.inputs(seed)
    in_layout = config.input_layout
    given = x if in_layout == "R" else piece(x, (placement(in_layout, config.sequence_dim),), rank, world)
    out = model(given.clone())
    ref_out = reference(x)
    last = config.layers[-1]
    out_placements = (placement(last.out_layout, config.sequence_dim),)
    local: torch.Tensor | None = None  # this rank's output piece, while backward can go on from it
    if last.local_output:
        if isinstance(out, DTensor):
            problems.append(
                Problem(
                    Kind.SHAPE,
                    "output",
                    got="a DTensor",
                    expected="a local torch.Tensor",
                    detail=f"(use_local_output={last.use_local_output})",
                )
            )
        else:
            local = out
    else:
        norm = tuple(Shard(p.dim % 3) if isinstance(p, Shard) else p for p in out_placements)
        if not isinstance(out, DTensor):
            problems.append(
                Problem(
                    Kind.SHAPE,
                    "output",
                    got=f"a {type(out).__name__}",
                    expected="a DTensor",
                    detail=f"(use_local_output={last.use_local_output})",
                )
            )
        elif tuple(out.placements) != norm or tuple(out.shape) != tuple(ref_out.shape):
            problems.append(
                Problem(
                    Kind.SHAPE,
                    "output",
                    got=(tuple(out.shape), tuple(out.placements)),
                    expected=(tuple(ref_out.shape), norm),
                    detail="(a DTensor's shape and placements)",
                )
            )
        else:
            local = out.to_local()
    if local is not None:
        expected_piece = piece(ref_out.detach(), out_placements, rank, world)
        diff = _close("output's local piece", local, expected_piece, rank)
        if diff is not None:
            problems.append(diff)
            if local.shape != expected_piece.shape:
                local = None
    if _any_rank(ctx, local is None) or local is None:
        return problems
    (ref_out * coef).sum().backward()
    (local * piece(coef, out_placements, rank, world)).sum().backward()
    for name, p in params.items():
        ref_grad = ref_params[name].grad
        assert ref_grad is not None
        grad = p.grad
        if not isinstance(grad, DTensor):
            problems.append(Problem(Kind.SHAPE, f"grad {name}", got=type(grad).__name__, expected="a DTensor"))
            continue
        if tuple(grad.placements) == tuple(p.placements):
            diff = _close(
                f"grad {name}'s local piece", grad.to_local(), piece(ref_grad, tuple(p.placements), rank, world), rank
            )
            if diff is not None:
                problems.append(diff)
        diff = _close(f"grad {name} ({tuple(grad.placements)}).full_tensor()", grad.full_tensor(), ref_grad)
        if diff is not None:
            problems.append(diff)
    moved = {
        name: (tuple(p.grad.placements), tuple(p.placements))
        for name, p in params.items()
        if isinstance(p.grad, DTensor) and tuple(p.grad.placements) != tuple(p.placements)
    }
    try:
        torch.optim.SGD(model.parameters(), lr=LR).step()
    except RuntimeError as exc:
        problems.append(
            Problem.raised(
                exc,
                SGD_STEP,
                subject=tuple((n, g, p) for n, (g, p) in moved.items()),
                detail=f"(gradient placements that differ from their parameter's: {moved})",
            )
        )
        return problems
    torch.optim.SGD(reference.parameters(), lr=LR).step()
    for name, p in params.items():
        placements = tuple(p.placements) if isinstance(p, DTensor) else (Replicate(),)
        local = p.to_local() if isinstance(p, DTensor) else p
        diff = _close(
            f"after an SGD step: {name}'s local piece",
            local.detach(),
            piece(ref_params[name].detach(), placements, rank, world),
            rank,
        )
        if diff is not None:
            problems.append(diff)
    return capped(problems)


# ---------------------------------------------------------------------------
# strategies


@st.composite
def tp_configs(
    draw: st.DrawFn, world_size: int, *, max_layers: int = 4, max_width: int = 8, max_batch: int = 3, max_seq: int = 4
) -> TPConfig:
    """A :class:`TPConfig` for ``world_size`` ranks.

    Covers 1 to ``max_layers`` layers (Colwise/Rowwise Linear, with or without bias, and at most
    ``MAX_NORMS`` SequenceParallel LayerNorms, a LayerNorm only where its input is a DTensor or a local
    sequence shard), widths 1 to ``max_width``, batch 1 to ``max_batch``, sequence 1 to ``max_seq``,
    ``sequence_dim`` 1 or 0, the input replicated or sharded, every input/output layout each style
    takes, local or DTensor outputs, and ``src_data_rank`` 0..W-1 or None.  A local sharded tensor
    that a style turns into a DTensor (the input, a non-last local output) has its sharded dim
    divisible by ``world_size`` (``DTensor.from_local`` assumes even shards); everything else may be
    uneven.

    Shrinks towards one ``ColwiseParallel()`` Linear 1 -> 1 with bias, batch 1, sequence 1, the input
    replicated, ``sequence_dim`` 1, ``src_data_rank`` 0.
    """
    if world_size < 1:
        raise InvalidArgument(f"world_size must be >= 1, got {world_size}")
    w = world_size
    sequence_dim = draw(st.sampled_from((1, 0)), label="sequence_dim")
    batch = draw(st.integers(1, max_batch), label="batch")
    seq = draw(st.integers(1, max_seq), label="seq")
    in_features = draw(st.integers(1, max_width), label="in_features")
    tokens = (batch, seq)[sequence_dim]
    even_tokens = tokens % w == 0
    inputs = ["R"] + (["T"] if even_tokens else []) + (["H"] if in_features % w == 0 else [])
    input_layout = draw(st.sampled_from(inputs), label="input_layout")
    n = draw(st.integers(1, max_layers), label="depth")
    layout, dtensor_in, width, norms = input_layout, False, in_features, 0
    layers: list[TPLayer] = []
    for i in range(n):
        last = i == n - 1
        kinds = ["colwise", "rowwise"]
        if norms < MAX_NORMS and (dtensor_in or layout == "T"):
            kinds.append("sequence")
        kind = draw(st.sampled_from(kinds))
        if kind == "sequence":
            norms += 1
            local_ok = last or even_tokens
            use_local = draw(st.sampled_from([None, True] if local_ok else [None]))
            layers.append(TPLayer("sequence", width, use_local_output=use_local))
            layout, dtensor_in = "T", bool(not use_local)
            continue
        input_layout_ = None if layout == _DEFAULT_IN[kind] else layout
        use_local = draw(st.sampled_from([None, False]))
        local = use_local is None
        outs = [None] + [name for name in LAYOUTS if name != _DEFAULT_OUT[kind]]
        if local and not last and not even_tokens:
            outs.remove("T")
        out = draw(st.sampled_from(outs))
        out_layout = out or _DEFAULT_OUT[kind]
        if local and not last and out_layout == "H":
            out_features = w * draw(st.integers(1, max(1, max_width // w)))
        else:
            out_features = draw(st.integers(1, max_width))
        bias = draw(st.booleans().map(lambda b: not b))
        layers.append(TPLayer(kind, out_features, input_layout_, out, use_local, bias))
        layout, dtensor_in, width = out_layout, not local, out_features
    src: int | None = 0
    if HAS_SRC_DATA_RANK:
        src = draw(st.one_of(st.integers(0, w - 1), st.none()), label="src_data_rank")
    return TPConfig(w, batch, seq, in_features, tuple(layers), input_layout, sequence_dim, src)


# ---------------------------------------------------------------------------
# the driver-side check


def check(pool: Pool, config: TPConfig, seed: int, *, parallelize: Callable[..., nn.Module] = _parallelize) -> None:
    """Parallelise ``config``'s model on every rank of ``pool`` with ``parallelize`` (``parallelize_module``
    by default; any importable function with its signature) and compare it with the local reference;
    raise :class:`PropertyFailure` if any rank's parameters, output, gradients or stepped parameters
    differ."""
    with known_failures("tensor_parallel", config=config, seed=seed):
        results = pool.run(tp_parity, config, seed, parallelize=parallelize)
        wrong = {rank: problems for rank, problems in enumerate(results) if problems}
        if wrong:
            raise PropertyFailure(
                f"tensor parallelism differs from the local reference on ranks {sorted(wrong)}:{by_rank(wrong)}",
                results,
            )
