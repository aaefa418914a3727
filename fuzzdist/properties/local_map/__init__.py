"""``local_map`` and ``register_sharding`` (DTensor's experimental API): a function run on local shards with
drawn input and output placements equals its documented global semantics, or is refused as documented.

Modules: this one alone (no known bugs met yet).

For a drawn :class:`LocalMapCase`, on a 1-D mesh over the pool, every rank distributes a tensor rebuilt from
the seed with the drawn ``held`` placement and calls one of :data:`FUNCTIONS` through it:

* ``local_map(func, out_placements, in_placements, redistribute_inputs=...)``: ``local_map``'s docstring: it
  applies ``func`` "to each local shard of the input DTensor and returns a DTensor constructed from the return
  value of ``func``" with ``out_placements``; with ``in_placements`` given, "If the placements are not the same
  and ``redistribute_inputs`` is ``False``, an exception will be raised. Otherwise if ``redistribute_inputs``
  is ``True``, the argument will be first redistributed to the required sharding placements"; "Raises:
  ValueError: If ``redistribute_inputs=False`` but the input DTensor needs a redistribution".  So: where
  ``held`` differs from ``wanted`` without ``redistribute_inputs``, every rank must raise ValueError; else
  the result must be a DTensor with the function's output placement whose ``full_tensor()`` equals the
  function applied to the whole tensor (pointwise functions bitwise; a sum within float rounding).
* ``register_sharding``: a custom operator that DTensor has no strategy for (``torch.library.custom_op``,
  "(1) there doesn't exist a default sharding strategy for ``op``, e.g. when ``op`` is a custom operator")
  is registered with a strategy that keeps any Shard/Replicate placement of its pointwise input; the op on
  the DTensor must then return a DTensor with one of the registered output placements (the docs: "a sequence
  of 2-tuples, each specifying acceptable output placements"; DTensor may pick another than the input's) and
  the op's global values, bitwise.

Shards are drawn even for ``local_map`` (each dimension a multiple of the world size; the custom op gets any
shape), and why.  torch 2.13's ``local_map``
builds each output with ``DTensor.from_local(..., run_check=False)`` and no ``shape``, and ``from_local``
documents: "If not provided, ``shape`` will be computed assuming the given distributed tensor is evenly
sharded across ranks" (``torch/distributed/tensor/_api.py``); ``local_map``'s own source says "the current
code doesn't consider the uneven sharding case" (``torch/distributed/tensor/experimental/_func_map.py``).
``local_map`` documents no way to pass the global shape, so with uneven shards the output's shape is,
as documented, computed as if even: not a contract this property can check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st

from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import dtensor
from fuzzdist.properties._results import fail_on_ranks_with_problems
from fuzzdist.strategies import TensorSpec, seeds
from fuzzdist.toolkit.checks import first_difference, mismatch
from fuzzdist.toolkit.reporting import capped

try:
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.experimental import local_map, register_sharding
except ImportError as exc:  # pragma: no cover - a torch without DTensor's experimental API
    raise ImportError(f"torch {torch.__version__} has no torch.distributed.tensor.experimental.local_map") from exc

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

__all__ = ["FUNCTIONS", "LocalMapCase", "check", "local_map_cases", "run_case"]

FUNCTIONS = ("double", "add_one", "sum", "custom_op")
"""What runs on the shards, in shrink order: ``double`` (x * 2) and ``add_one`` (x + 1) are pointwise, their
output placed as the input; ``sum`` sums the local shard, its output ``Partial()`` where the input is sharded
(the shards' sums add up to the whole's) and ``Replicate()`` where it is replicated; ``custom_op`` calls a
pointwise custom operator under ``register_sharding`` (no ``local_map``)."""
MAX_DIM = 3  # each dimension is 1 to MAX_DIM times the world size


@dataclass(frozen=True)
class LocalMapCase:
    """A tensor of ``shape`` and ``dtype`` from ``seed``, distributed as ``held`` (``"R"`` or ``"S<d>"``), run
    through ``function`` with ``in_placements`` ``wanted`` and ``redistribute_inputs``."""

    shape: tuple[int, ...]
    function: str = "double"
    held: str = "R"
    wanted: str = "R"
    redistribute_inputs: bool = False
    dtype: torch.dtype = torch.float32
    seed: int = 0

    def __post_init__(self) -> None:
        if self.function not in FUNCTIONS:
            raise InvalidArgument(f"function={self.function!r}; choose from {FUNCTIONS}")
        for name in (self.held, self.wanted):
            if name != "R" and not (name[:1] == "S" and name[1:].isdigit() and int(name[1:]) < len(self.shape)):
                raise InvalidArgument(f"placement {name!r}: 'R' or 'S<d>' with d < {len(self.shape)}")

    @property
    def refused(self) -> bool:
        """Whether ``local_map`` must refuse the call (ValueError): the input needs redistributing and
        ``redistribute_inputs`` is off."""
        return self.function != "custom_op" and self.held != self.wanted and not self.redistribute_inputs


# ---------------------------------------------------------------------------
# on the ranks


def _out_placement(case: LocalMapCase) -> Any:
    """The function's documented output placement, given the placement its input runs with (for the custom op,
    the strategy that keeps the input's)."""
    runs_as = case.held if case.function == "custom_op" else case.wanted
    if case.function == "sum":
        return Replicate() if runs_as == "R" else Partial()
    return dtensor.placement(runs_as)


def _global(case: LocalMapCase, full: torch.Tensor) -> torch.Tensor:
    """What the function means for the whole tensor."""
    if case.function == "sum":
        return full.sum()
    if case.function == "add_one":
        return full + 1
    return full * 2  # double, and the custom op


_CUSTOM_OP: list[Any] = []  # the custom op and its sharding, defined once per rank process


def custom_double() -> Any:
    """``fuzzdist_local_map::double``: a pointwise custom op (x * 2), with a ``register_sharding`` strategy that
    keeps any Replicate or Shard placement of its input."""
    if not _CUSTOM_OP:

        @torch.library.custom_op("fuzzdist_local_map::double", mutates_args=())
        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @double.register_fake  # DTensor propagates shapes through it
        def _(x: torch.Tensor) -> torch.Tensor:
            return torch.empty_like(x)

        @register_sharding(torch.ops.fuzzdist_local_map.double.default)  # type: ignore[untyped-decorator]
        def double_sharding(x: Any) -> list[tuple[list[Any], list[Any]]]:
            return [([Replicate()], [Replicate()])] + [([Shard(d)], [Shard(d)]) for d in range(x.ndim)]

        _CUSTOM_OP.append(torch.ops.fuzzdist_local_map.double.default)
    return _CUSTOM_OP[0]


def _local_function(case: LocalMapCase) -> Callable[[torch.Tensor], torch.Tensor]:
    functions: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "double": lambda x: x * 2,
        "add_one": lambda x: x + 1,
        "sum": lambda x: x.sum(),
    }
    return functions[case.function]


def run_case(
    ctx: RankContext, case: LocalMapCase, local_map_fn: Callable[..., Any] = local_map
) -> list[Problem] | None:
    """On every rank: run ``case`` (see the module docstring) with ``local_map_fn`` (``local_map`` by default);
    the problems found, or None."""
    mesh = dtensor.device_mesh(ctx.device.type, (ctx.world_size,))
    full = TensorSpec(case.shape, case.dtype).materialize(ctx.device, case.seed)
    held = distribute_tensor(full, mesh, [dtensor.placement(case.held)])
    what = f"{case.function} of a tensor held as {case.held}"
    if case.function == "custom_op":
        result = custom_double()(held)
    else:
        mapped = local_map_fn(
            _local_function(case),
            out_placements=[_out_placement(case)],
            in_placements=([dtensor.placement(case.wanted)],),
            redistribute_inputs=case.redistribute_inputs,
        )
        try:
            result = mapped(held)
        except ValueError:
            if case.refused:
                return None  # documented: ValueError, the input needs redistributing
            raise
        if case.refused:
            return [Problem(Kind.MISMATCH, f"{what}, wanted as {case.wanted}", detail="ran, not refused")]
    problems: list[Problem] = []
    if not isinstance(result, DTensor):
        return [Problem(Kind.MISMATCH, what, detail=f"returned {type(result).__name__}, not a DTensor")]
    # local_map places its output as out_placements says; register_sharding lets DTensor pick any strategy the
    # function returned ("acceptable output placements"): all Replicate/Shard ones here, none Partial.
    acceptable = (
        [(Replicate(),)] + [(Shard(d),) for d in range(len(case.shape))]
        if case.function == "custom_op"
        else [(_out_placement(case),)]
    )
    if tuple(result.placements) not in acceptable:
        problems.append(Problem(Kind.MISMATCH, f"{what}: placements", got=result.placements, expected=acceptable))
    expected = _global(case, full)
    got = result.full_tensor()
    if tuple(got.shape) != tuple(expected.shape):
        return [*problems, Problem(Kind.SHAPE, what, got=tuple(got.shape), expected=tuple(expected.shape))]
    if case.function == "sum":  # another summation order: within n roundings of the magnitudes' sum
        bound = torch.finfo(case.dtype).eps * full.numel() * full.abs().sum().item()
        error = (got.double() - expected.double()).abs()
        problem = mismatch(what, got, expected, ~(error <= bound), bound, error)
    else:
        problem = first_difference(got, expected, what)
    if problem is not None:
        problems.append(problem)
    return capped(problems) or None


# ---------------------------------------------------------------------------
# the strategy


@st.composite
def _case(draw: st.DrawFn, world_size: int) -> LocalMapCase:
    function = draw(st.sampled_from(FUNCTIONS))
    ndim = draw(st.integers(1, 2))
    if function == "custom_op":  # any shape: register_sharding's output shape comes from the op's fake impl
        shape = tuple(draw(st.integers(1, MAX_DIM * world_size)) for _ in range(ndim))
    else:  # even shards for local_map: see the module docstring
        shape = tuple(world_size * draw(st.integers(1, MAX_DIM)) for _ in range(ndim))
    names = st.sampled_from(["R"] + [f"S{d}" for d in range(ndim)])
    held = draw(names)
    return LocalMapCase(
        shape=shape,
        function=function,
        held=held,
        wanted=draw(names),
        redistribute_inputs=draw(st.booleans()),
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        seed=draw(seeds()),
    )


def local_map_cases(world_size: int) -> st.SearchStrategy[LocalMapCase]:
    """Cases for ``world_size`` ranks: 1-D or 2-D float32/float64 tensors (for ``local_map``, of dimensions the
    world size divides), every function of :data:`FUNCTIONS`, every Replicate/Shard placement held and wanted, with and
    without ``redistribute_inputs``.  Shrinks towards ``double`` of a replicated 1-D tensor."""
    if world_size < 1:
        raise InvalidArgument(f"world_size={world_size}: local_map needs a pool of 1 or more ranks")
    return _case(world_size)


# ---------------------------------------------------------------------------
# the driver-side check


def check(pool: Pool, case: LocalMapCase, *, local_map_fn: Callable[..., Any] = local_map) -> None:
    """Run ``case`` on every rank of ``pool`` (``local_map_fn``: torch's ``local_map`` by default); raise
    :class:`PropertyFailure` if any rank's result differs from the global semantics or a documented refusal
    did not happen."""
    if case.function != "custom_op" and any(size % pool.world_size for size in case.shape):
        raise InvalidArgument(
            f"shape {case.shape}: every dimension must be a multiple of the world size {pool.world_size} (even "
            "shards; see fuzzdist.properties.local_map): draw it with local_map_cases"
        )
    with known_failures("local_map", case=case):
        results = pool.run(run_case, case, local_map_fn=local_map_fn)
        fail_on_ranks_with_problems(
            results, "found local_map or register_sharding differing from the global semantics"
        )
