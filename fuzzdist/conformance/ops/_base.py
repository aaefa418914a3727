"""``OpInfo``, the base of every op definition, and ``OpCall``, one drawn call of an op.

An ``OpCall`` is small and picklable: it is drawn in the driver and sent to
every rank, which builds its tensors from it (``spec`` and ``seed``), and the
driver rebuilds the same input values from it to compute the reference.  It
carries its ``OpInfo`` along, so a rank runs an op it was never told about
(one registered in the driver only, e.g. by a test).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.problems import Kind, Problem
from fuzzdist.strategies import TensorSpec, mix_seed, seeds
from fuzzdist.toolkit.oracle import exact_problem, reduction_problem, show

REDUCE_OPS: tuple[str, ...] = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR")

# The reduce ops fuzzed for each dtype kind (fuzzdist.strategies.DTYPE_KINDS).  Complex
# tensors only take what torch.distributed lets through (``supports_complex``: SUM, AVG).
# Bitwise ops only for integers and bool; AVG is not defined for them.  float8 has no
# CPU arithmetic in torch to compute a reference with, so its reductions are not fuzzed.
REDUCE_OPS_BY_KIND: dict[str, tuple[str, ...]] = {
    "float": ("SUM", "PRODUCT", "MIN", "MAX", "AVG"),
    "complex": ("SUM", "AVG"),
    "int": ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"),
    "unsigned": ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"),
    "bool": ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"),
    "float8": (),
}

# op name -> its definition, in the order ops are probed, fuzzed and reported.  Filled by
# fuzzdist.conformance.ops from its modules; OpCall("name", ...) looks names up here.
OPS: dict[str, OpInfo] = {}

SEEDS = seeds()
# Output views start 0 elements (shrinks here) or a few elements into their buffers.
OUT_OFFSETS = st.one_of(st.just(0), st.integers(1, 8))
# The main input of a ``layouts`` op is probed in each of these layouts (after a plain call worked).
LAYOUT_PROBES: dict[str, TensorSpec] = {
    "sliced": TensorSpec((3,), torch.float32, "sliced", storage_offset=1),
    "transposed": TensorSpec((2, 3), torch.float32, "transposed"),
    "channels_last": TensorSpec((1, 2, 2, 2), torch.float32, "channels_last"),
}
LAYOUT_VARIANT = "layout="  # a variant probe "layout=<name>": accepted adds the layout to the drawn ones
UNEVEN_VARIANT = "uneven splits"  # a variant probe: refused makes the op draw even splits only
_BARRIER_SPEC = TensorSpec((1,), torch.float32)


def method_name(new: str, old: str) -> str:
    """The ProcessGroup method this torch's torch.distributed calls: ``new`` where it exists."""
    return new if hasattr(dist.ProcessGroup, new) else old


@dataclass
class Capabilities:
    """What the probes found the backend implements at one world size."""

    world_size: int
    # (op, reduce op or None) -> the dtypes it accepted, in fuzzdist's shrink order
    dtypes: dict[tuple[str, str | None], tuple[torch.dtype, ...]] = field(default_factory=dict)
    layouts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # op -> layouts it accepted
    hung: dict[str, str] = field(default_factory=dict)  # op -> what happened when it was probed
    uneven: dict[str, bool] = field(default_factory=dict)  # all-to-all op -> False if uneven splits refused
    forms: dict[str, tuple[str, ...]] = field(default_factory=dict)  # op -> the extra argument forms it accepted

    def reduce_ops(self, op: str) -> tuple[str, ...]:
        """The ReduceOps ``op`` accepted for some dtype."""
        return tuple(r for (o, r), d in self.dtypes.items() if o == op and r is not None and d)

    def available(self, op: str) -> bool:
        """Whether ``op`` is fuzzed at this world size: enough ranks, not hung, some dtype accepted."""
        info = OPS[op]
        if self.world_size < info.min_world or op in self.hung:
            return False
        if info.reduces:
            return bool(self.reduce_ops(op))
        return bool(self.dtypes.get((op, None)))


@dataclass(frozen=True)
class Reduction:
    """An expected output that is ``reduce_op`` over ``inputs`` (one per rank), in any valid order."""

    inputs: list[torch.Tensor]


# What a rank should hold in one output: a tensor (bit-exact), a Reduction, or None (not checked).
Expected = torch.Tensor | Reduction | None


@dataclass(frozen=True)
class OpInfo(ABC):
    """One operation of the c10d contract, as fuzzdist draws, calls and checks it.

    ``method`` is the ProcessGroup method called, with the arguments and
    option struct that ``mirrors`` (the torch.distributed function) builds
    in the installed torch.  A subclass defines ``prepare`` (the call on a
    rank) and ``expected`` (the reference); the other methods have defaults
    driven by the fields, overridden where an op differs.
    """

    name: str
    method: str
    mirrors: str
    reduces: bool = False
    root: str | None = None  # "src" or "dst": the op has a root rank
    min_world: int = 1
    layouts: bool = False  # its main input takes the drawn layout (else contiguous)
    rows: bool = False  # the spec is the shape of one row; the drawn splits count rows
    # Other forms of its arguments torch.distributed documents (reduce_scatter_tensor: "stack"), each
    # probed once per world size and drawn where the backend accepts it.
    forms: tuple[str, ...] = ()
    # Its main input is joined with the other ranks' along dim 0 (all_gather_into_tensor,
    # reduce_scatter_tensor): a 0-d tensor has no dim 0, so only specs of one dim or more are drawn.
    needs_dim0: ClassVar[bool] = False

    @property
    def needs_dtypes(self) -> bool:
        """Whether the op takes tensors (is probed and fuzzed per dtype)."""
        return True

    def call(self, spec: TensorSpec = _BARRIER_SPEC, seed: int = 0, **fields: Any) -> OpCall:
        """An ``OpCall`` of this op (carrying this definition, registered or not)."""
        return OpCall(self.name, spec, seed, _info=self, **fields)

    # -- drawing (in the driver) ---------------------------------------------------------

    def calls(
        self,
        caps: Capabilities,
        max_bytes: int,
        reduce_op: str | None = None,
    ) -> st.SearchStrategy[OpCall]:
        """Calls of this op at ``caps.world_size`` ranks, over the dtypes and layouts it supports
        (with ``reduce_op``, or a drawn one).

        Shrinks towards the first reduce op (SUM), a one-element float32 tensor,
        root 0, no output offset, seed 0.
        """

        @st.composite
        def draw(d: st.DrawFn) -> OpCall:
            return self.draw(d, caps, max_bytes, reduce_op)

        return draw()

    def draw(self, d: st.DrawFn, caps: Capabilities, max_bytes: int, reduce_op: str | None) -> OpCall:
        """One call: reduce op, tensor spec, roots, splits, output offset, seed, drawn in this order."""
        chosen = reduce_op
        if self.reduces and chosen is None:
            chosen = d(st.sampled_from(caps.reduce_ops(self.name)))
        dtypes = caps.dtypes[(self.name, chosen)]
        spec = d(self.specs(dtypes, caps, max_bytes))
        root, peer = self.draw_roots(d, caps.world_size)
        splits, even = self.draw_splits(d, caps)
        out_offset = d(OUT_OFFSETS)
        seed = d(SEEDS)
        accepted = caps.forms.get(self.name, ())
        form = d(st.sampled_from((None, *accepted))) if accepted else None  # shrinks to the plain form
        return self.call(
            spec,
            seed,
            reduce_op=chosen,
            root=root,
            peer=peer,
            splits=splits,
            even_splits=even,
            out_offset=out_offset,
            form=form,
        )

    def specs(
        self,
        dtypes: tuple[torch.dtype, ...],
        caps: Capabilities,
        max_bytes: int,
    ) -> st.SearchStrategy[TensorSpec]:
        """The main input's spec, in a layout the backend accepted where the op takes layouts (of one dim
        or more where the op ``needs_dim0``)."""
        layouts = caps.layouts.get(self.name, ("contiguous",)) if self.layouts else ("contiguous",)
        specs = fst.tensor_specs(dtypes=st.sampled_from(dtypes), layouts=layouts, max_bytes=max_bytes)
        return specs.filter(lambda s: s.ndim >= 1) if self.needs_dim0 else specs

    def draw_roots(self, d: st.DrawFn, world: int) -> tuple[int | None, int | None]:
        """(root, peer): the src/dst rank of a rooted op; no peer."""
        return (d(fst.source_ranks(world)) if self.root is not None else None), None

    def draw_splits(self, d: st.DrawFn, caps: Capabilities) -> tuple[tuple[tuple[int, ...], ...] | None, bool]:
        """(splits, even_splits): none, except for the all-to-all ops."""
        return None, False

    # -- probing (in the driver) ---------------------------------------------------------

    def probe_call(self, world: int, spec: TensorSpec, reduce_op: str | None) -> OpCall:
        """The smallest plain call: root 0, the tensor ``spec``."""
        return self.call(spec, 0, reduce_op=reduce_op, root=0 if self.root is not None else None)

    def probes(
        self,
        world: int,
        dtypes: tuple[torch.dtype, ...],
        kinds: dict[torch.dtype, str],
    ) -> list[tuple[str | None, torch.dtype | None, OpCall]]:
        """(reduce op, dtype, call): one 2-element probe per dtype (and per ReduceOp for that dtype)."""
        plan: list[tuple[str | None, torch.dtype | None, OpCall]] = []
        for dtype in dtypes:
            for reduce_op in REDUCE_OPS_BY_KIND[kinds[dtype]] if self.reduces else (None,):
                plan.append((reduce_op, dtype, self.probe_call(world, TensorSpec((2,), dtype), reduce_op)))
        return plan

    def form_probes(self, world: int, dtype: torch.dtype, reduce_op: str | None) -> list[tuple[str, OpCall]]:
        """(form, call) probes of the op's other argument forms, each run on its own (it may abort a rank)."""
        return [
            (
                form,
                self.call(
                    TensorSpec((2,), dtype),
                    0,
                    reduce_op=reduce_op,
                    root=0 if self.root is not None else None,
                    form=form,
                ),
            )
            for form in self.forms
        ]

    def variant_probes(self, world: int, dtype: torch.dtype, reduce_op: str | None) -> list[tuple[str, OpCall]]:
        """(variant, call) probes run once a plain call worked: the memory layouts of the main input."""
        if not self.layouts:
            return []
        return [
            (
                f"{LAYOUT_VARIANT}{layout}",
                self.probe_call(
                    world, TensorSpec(spec.shape, dtype, spec.layout, storage_offset=spec.storage_offset), reduce_op
                ),
            )
            for layout, spec in LAYOUT_PROBES.items()
        ]

    # -- running (on a rank) -------------------------------------------------------------

    @abstractmethod
    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Any:
        """This rank's tensors for ``call`` (the ``index``-th of its example), ready to issue:
        a ``fuzzdist.conformance.ops._buffers.Prepared`` whose ``issue(async_op)`` calls ``pg``."""

    # -- checking (in the driver) --------------------------------------------------------

    @abstractmethod
    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        """rank -> [(what, expectation)], in the order ``prepare`` registered the rank's outputs."""

    def check(self, call: OpCall, world: int, observed: list[dict[str, Any]]) -> list[Problem]:
        """What is wrong with the ranks' observations of ``call`` (as returned by the ranks; empty: it
        conforms)."""
        return self.problems(call, world, [dict(obs, out=[unpack(o) for o in obs["out"]]) for obs in observed])

    def problems(self, call: OpCall, world: int, observed: list[dict[str, Any]]) -> list[Problem]:
        """The ranks' own notes, then each output compared with ``expected``."""
        problems = [Problem(Kind.NOTE, rank=r, detail=note) for r, obs in enumerate(observed) for note in obs["notes"]]
        for r, wanted in self.expected(call, world).items():
            outs = observed[r]["out"]
            if len(outs) != len(wanted):  # pragma: no cover - prepare and expected disagree
                problems.append(
                    Problem(
                        Kind.MISSING,
                        "outputs",
                        rank=r,
                        got=len(outs),
                        expected=len(wanted),
                        detail=f"returned {len(outs)} outputs, expected {len(wanted)}",
                    )
                )
                continue
            for (what, expected), actual in zip(wanted, outs, strict=False):
                problem = self.compare(call, what, expected, actual)
                if problem is not None:
                    problems.append(replace(problem, rank=r))
        return problems

    def compare(self, call: OpCall, what: str, expected: Expected, actual: torch.Tensor) -> Problem | None:
        """None if ``actual`` is right: bit-exact, or a valid reduction (see ``_reference``)."""
        if expected is None:
            return None
        if isinstance(expected, Reduction):
            assert call.reduce_op is not None
            return reduction_problem(what, call.reduce_op, expected.inputs, actual)
        return exact_problem(what, actual, expected)

    def input_lines(self, call: OpCall, world: int) -> list[str]:
        """Each rank's inputs, one line each, for a failure message."""
        return [f"rank {r}: {show(input_values(call, r))}" for r in range(world)]

    def inputs_summary(self, call: OpCall, world: int) -> str:
        """Every rank's inputs, briefly, for a failure message."""
        lines = self.input_lines(call, world)
        if not lines:
            return ""
        return (
            "  inputs:\n"
            + "\n".join(f"    {line}" for line in lines[:16])
            + (f"\n    ... ({len(lines)} in all)" if len(lines) > 16 else "")
        )

    # -- describing ----------------------------------------------------------------------

    def describe_args(self, call: OpCall) -> list[str]:
        """The call's arguments as they read in a failure message."""
        parts = []
        if call.reduce_op is not None:
            parts.append(f"op=ReduceOp.{call.reduce_op}")
        parts.extend(self.describe_roots(call))
        parts.append(f"{'row' if self.rows else 'tensor'}={call.spec!r}")
        if call.splits is not None:
            parts.append(f"splits={[list(row) for row in call.splits]}")
        if call.out_offset:
            parts.append(f"output_offset={call.out_offset}")
        if call.form is not None:
            parts.append(f"form={call.form!r}")
        parts.append(f"seed={call.seed}")
        return parts

    def describe_roots(self, call: OpCall) -> list[str]:
        """The root argument as it reads in a message (``src=1``)."""
        return [f"{self.root}={call.root}"] if self.root is not None else []


@dataclass(frozen=True, repr=False)
class OpCall:
    """One call of ``op`` by every rank.

    ``spec`` and ``seed`` give every rank's input: rank r's tensor for slot k
    is ``spec`` materialized with ``input_seed(seed, r, k)``.  ``root`` is the
    src/dst rank of rooted ops (for send_recv, the sender), ``peer`` the
    receiver of send_recv.  For alltoall ops, ``spec`` is the shape of one row
    and ``splits[i][j]`` the number of rows rank i sends to rank j
    (``even_splits``: the split sizes are passed as ``[]``).  Outputs are
    views ``out_offset`` elements into guarded buffers.  For barrier,
    ``late_rank`` arrives a few milliseconds after the others.
    """

    op: str
    spec: TensorSpec = _BARRIER_SPEC
    seed: int = 0
    reduce_op: str | None = None
    root: int | None = None
    peer: int | None = None
    splits: tuple[tuple[int, ...], ...] | None = None
    even_splits: bool = False
    out_offset: int = 0
    late_rank: int | None = None
    form: str | None = None  # one of the op's ``forms`` (None: its plain form)
    # the op's definition (OpInfo.call passes it; otherwise looked up in OPS by name), pickled with the call
    _info: OpInfo | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        info = self._info if self._info is not None else OPS.get(self.op)
        if info is None or info.name != self.op:
            raise InvalidArgument(f"unknown op {self.op!r}; choose from {sorted(OPS)}")
        if self.reduce_op is not None and self.reduce_op not in REDUCE_OPS:
            raise InvalidArgument(f"unknown reduce op {self.reduce_op!r}; choose from {REDUCE_OPS}")
        object.__setattr__(self, "_info", info)

    @property
    def info(self) -> OpInfo:
        """The op's definition."""
        assert self._info is not None  # set by __post_init__
        return self._info

    def describe(self) -> str:
        """The call as it reads in a failure message: ``allreduce(op=ReduceOp.SUM, tensor=..., seed=0)``."""
        return f"{self.op}({', '.join(self.info.describe_args(self))})"

    __repr__ = describe

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.describe())


def input_seed(seed: int, rank: int, slot: int) -> int:
    """The seed of rank ``rank``'s input tensor number ``slot``, the same in every process."""
    return mix_seed(seed, rank, slot)


def contiguous_spec(spec: TensorSpec, shape: tuple[int, ...] | None = None) -> TensorSpec:
    """``spec`` with another shape (default: its own), contiguous, no storage offset."""
    return replace(spec, shape=spec.shape if shape is None else tuple(shape), layout="contiguous", storage_offset=0)


def input_values(call: OpCall, rank: int, slot: int = 0, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """Rank ``rank``'s input ``slot`` as a contiguous CPU tensor (its logical values)."""
    return contiguous_spec(call.spec, shape).materialize("cpu", input_seed(call.seed, rank, slot))


def pack(t: torch.Tensor) -> tuple[str, tuple[int, ...], bytes]:
    """A tensor as (dtype name, shape, raw bytes): every dtype survives pickling this way
    (torch can't unpickle uint16/32/64 tensors)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return str(t.dtype).replace("torch.", ""), tuple(t.shape), flat.view(torch.uint8).numpy().tobytes()


def unpack(packed: tuple[str, tuple[int, ...], bytes]) -> torch.Tensor:
    """The tensor ``pack`` packed."""
    name, shape, data = packed
    dtype = getattr(torch, name)
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return raw.view(dtype).reshape(shape)
