"""``local_map`` and ``register_sharding`` (DTensor's experimental API): a function run on local shards with
drawn input and output placements equals its documented global semantics, or is refused as documented.

Modules: this one and ``known_bugs`` (the torch bugs this family runs into).

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

Uneven shards are drawn too (``torch.chunk``'s pieces, as ``distribute_tensor`` documents them: "The uneven
sharding behavior is experimental and subject to change"), and ``local_map``'s docstring says nothing against
them.  torch 2.13's ``local_map`` builds each output with ``DTensor.from_local(..., run_check=False)`` and no
``shape``, which ``from_local`` documents as computed "assuming the given distributed tensor is evenly sharded
across ranks" (``torch/distributed/tensor/_api.py``): with uneven pieces a sharded output's global shape is
wrong (and differs across ranks), and its ``full_tensor()`` aborts a rank in gloo.  So every rank compares its
result's global shape with the whole's before any collective, and a wrong one is a problem of
:attr:`~fuzzdist.problems.Symptom.EVEN_SHARDS_ASSUMED` where it is exactly the shape computed as if even: the
known bug ``local-map-uneven-shard-output-wrong-shape`` (``known_bugs``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st

from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem, Symptom
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

__all__ = ["FUNCTIONS", "LocalMapCase", "check", "custom_double", "keeps_placement", "local_map_cases", "run_case"]

FUNCTIONS = ("double", "add_one", "sum", "custom_op")
"""What runs on the shards, in shrink order: ``double`` (x * 2) and ``add_one`` (x + 1) are pointwise, their
output placed as the input; ``sum`` sums the local shard, its output ``Partial()`` where the input is sharded
(the shards' sums add up to the whole's) and ``Replicate()`` where it is replicated; ``custom_op`` calls a
pointwise custom operator under ``register_sharding`` (no ``local_map``)."""
MAX_DIM = 3  # each dimension has 1 to MAX_DIM times the world size elements


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


def keeps_placement(x: Any) -> list[tuple[list[Any], list[Any]]]:
    """The custom op's ``register_sharding`` strategy: any Replicate or Shard placement of its pointwise input
    is kept by its output (``register_sharding``'s docstring: "The function should return a sequence of
    2-tuples, each specifying acceptable output placements and its corresponding input placements")."""
    return [([Replicate()], [Replicate()])] + [([Shard(d)], [Shard(d)]) for d in range(x.ndim)]


_CUSTOM_OPS: dict[str, Any] = {}  # the custom op of each sharding strategy, defined once per rank process


def custom_double(sharding: Callable[[Any], Any] = keeps_placement) -> Any:
    """A pointwise custom op (x * 2) with ``sharding`` registered as its ``register_sharding`` strategy:
    ``fuzzdist_local_map::double`` for :func:`keeps_placement`, an op of its own for any other strategy (a
    planted one), so that registering it changes no other op's strategy."""
    name = "double"
    if sharding is not keeps_placement:
        name += "_" + "".join(c if c.isalnum() else "_" for c in f"{sharding.__module__}_{sharding.__qualname__}")
    if name not in _CUSTOM_OPS:

        @torch.library.custom_op(f"fuzzdist_local_map::{name}", mutates_args=())
        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @double.register_fake  # DTensor propagates shapes through it
        def _(x: torch.Tensor) -> torch.Tensor:
            return torch.empty_like(x)

        op = getattr(torch.ops.fuzzdist_local_map, name).default
        register_sharding(op)(sharding)
        _CUSTOM_OPS[name] = op
    return _CUSTOM_OPS[name]


def _local_function(case: LocalMapCase) -> Callable[[torch.Tensor], torch.Tensor]:
    functions: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "double": lambda x: x * 2,
        "add_one": lambda x: x + 1,
        "sum": lambda x: x.sum(),
    }
    return functions[case.function]


def _shape_problem(result: DTensor, expected: tuple[int, ...], world_size: int, what: str) -> Problem:
    """The problem of a result whose global shape is not ``expected``: of symptom
    :attr:`~fuzzdist.problems.Symptom.EVEN_SHARDS_ASSUMED` where it is this rank's local shape with each
    sharded dimension times ``world_size`` (the 1-D mesh's size)."""
    as_if_even = list(result.to_local().shape)
    for placement in result.placements:
        if isinstance(placement, Shard):
            as_if_even[placement.dim] *= world_size
    symptom = Symptom.EVEN_SHARDS_ASSUMED if tuple(result.shape) == tuple(as_if_even) else None
    got = tuple(result.shape)
    return Problem(Kind.SHAPE, f"{what}: the result's shape", got=got, expected=expected, symptom=symptom)


def run_case(
    ctx: RankContext,
    case: LocalMapCase,
    local_map_fn: Callable[..., Any] = local_map,
    sharding: Callable[[Any], Any] = keeps_placement,
) -> list[Problem] | None:
    """On every rank: run ``case`` (see the module docstring) with ``local_map_fn`` (``local_map`` by default)
    or, for the custom op, the ``register_sharding`` strategy ``sharding`` (:func:`keeps_placement` by
    default); the problems found, or None."""
    mesh = dtensor.device_mesh(ctx.device.type, (ctx.world_size,))
    full = TensorSpec(case.shape, case.dtype).materialize(ctx.device, case.seed)
    held = distribute_tensor(full, mesh, [dtensor.placement(case.held)])
    what = f"{case.function} of a tensor held as {case.held}"
    if case.function == "custom_op":
        result = custom_double(sharding)(held)
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
    if tuple(result.shape) != tuple(expected.shape):  # before full_tensor(), whose gather a wrong shape upsets
        return [*problems, _shape_problem(result, tuple(expected.shape), ctx.world_size, what)]
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
    shape = tuple(draw(st.integers(1, MAX_DIM * world_size)) for _ in range(ndim))  # even or not: see above
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
    """Cases for ``world_size`` ranks: 1-D or 2-D float32/float64 tensors of 1 to ``MAX_DIM`` times the world
    size along each dimension (shards even or not), every function of :data:`FUNCTIONS`, every Replicate/Shard
    placement held and wanted, with and without ``redistribute_inputs``.  Shrinks towards ``double`` of a
    replicated 1-D tensor of one element."""
    if world_size < 1:
        raise InvalidArgument(f"world_size={world_size}: local_map needs a pool of 1 or more ranks")
    return _case(world_size)


# ---------------------------------------------------------------------------
# the driver-side check


def check(
    pool: Pool,
    case: LocalMapCase,
    *,
    local_map_fn: Callable[..., Any] = local_map,
    sharding: Callable[[Any], Any] = keeps_placement,
) -> None:
    """Run ``case`` on every rank of ``pool`` (``local_map_fn``: torch's ``local_map`` by default; ``sharding``:
    the custom op's ``register_sharding`` strategy, :func:`keeps_placement` by default); raise
    :class:`PropertyFailure` if any rank's result differs from the global semantics or a documented refusal
    did not happen."""
    with known_failures("local_map", case=case):
        results = pool.run(run_case, case, local_map_fn=local_map_fn, sharding=sharding)
        fail_on_ranks_with_problems(results, "found local_map or register_sharding differing from the global semantics")
