"""The operations a conformance check runs, and ``OpCall``: one drawn call of one of them.

An ``OpCall`` is small and picklable: it is drawn in the driver and sent to
every rank, which builds its tensors from it (``spec`` and ``seed``), and the
driver rebuilds the same input values from it to compute the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from fuzzdist.strategies import TensorSpec
from fuzzdist.strategies._seeds import _mix_seed

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


def _method(new: str, old: str) -> str:
    """The ProcessGroup method this torch's torch.distributed calls: ``new`` where it exists."""
    return new if hasattr(dist.ProcessGroup, new) else old


@dataclass(frozen=True)
class OpInfo:
    """One operation of the c10d contract, as fuzzdist calls it.

    ``method`` is the ProcessGroup method called, with the arguments and
    option struct that ``mirrors`` (the torch.distributed function) builds
    in the installed torch.
    """

    name: str
    method: str
    mirrors: str
    reduces: bool = False
    root: str | None = None  # "src" or "dst": the op has a root rank
    min_world: int = 1
    layouts: bool = False  # its main input takes the drawn layout (else contiguous)
    rows: bool = False  # the spec is the shape of one row; the drawn splits count rows

    @property
    def needs_dtypes(self) -> bool:
        return self.name != "barrier"


OPS: dict[str, OpInfo] = {info.name: info for info in (
    OpInfo("allreduce", "allreduce", "all_reduce", reduces=True, layouts=True),
    OpInfo("broadcast", "broadcast", "broadcast", root="src", layouts=True),
    OpInfo("allgather", "allgather", "all_gather", layouts=True),
    OpInfo("allgather_into_tensor", _method("all_gather_single", "_allgather_base"), "all_gather_into_tensor",
           layouts=True),
    OpInfo("_allgather_base", "_allgather_base", "ProcessGroup._allgather_base (C++ callers)", layouts=True),
    OpInfo("reduce_scatter", "reduce_scatter", "reduce_scatter", reduces=True),
    OpInfo("reduce_scatter_tensor", _method("reduce_scatter_single", "_reduce_scatter_base"),
           "reduce_scatter_tensor", reduces=True),
    OpInfo("_reduce_scatter_base", "_reduce_scatter_base", "ProcessGroup._reduce_scatter_base (C++ callers)",
           reduces=True),
    OpInfo("alltoall", "alltoall", "all_to_all", rows=True),
    OpInfo("alltoall_base", _method("all_to_all_single", "alltoall_base"), "all_to_all_single", rows=True),
    OpInfo("gather", "gather", "gather", root="dst", layouts=True),
    OpInfo("scatter", "scatter", "scatter", root="src"),
    OpInfo("reduce", "reduce", "reduce", reduces=True, root="dst", layouts=True),
    OpInfo("send_recv", "send/recv", "send + recv", root="src", min_world=2, layouts=True),
    OpInfo("barrier", "barrier", "barrier"),
)}

# Composite checks, after the single operations.
ASYNC = "async"
DDP = "ddp_parity"
ALL_CHECKS: tuple[str, ...] = (*OPS, ASYNC, DDP)

_BARRIER_SPEC = TensorSpec((1,), torch.float32)


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

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}; choose from {sorted(OPS)}")
        if self.reduce_op is not None and self.reduce_op not in REDUCE_OPS:
            raise ValueError(f"unknown reduce op {self.reduce_op!r}; choose from {REDUCE_OPS}")

    @property
    def info(self) -> OpInfo:
        return OPS[self.op]

    def describe(self) -> str:
        info = self.info
        parts = []
        if self.reduce_op is not None:
            parts.append(f"op=ReduceOp.{self.reduce_op}")
        if self.op == "send_recv":
            parts.append(f"src={self.root}, dst={self.peer}")
        elif info.root is not None:
            parts.append(f"{info.root}={self.root}")
        if self.op == "barrier":
            if self.late_rank is not None:
                parts.append(f"late_rank={self.late_rank}")
        else:
            parts.append(f"{'row' if info.rows else 'tensor'}={self.spec!r}")
        if self.splits is not None:
            even = " (even: sizes passed as [])" if self.even_splits and self.op == "alltoall_base" else ""
            parts.append(f"splits={[list(row) for row in self.splits]}{even}")
        if self.out_offset:
            parts.append(f"output_offset={self.out_offset}")
        if self.op != "barrier":
            parts.append(f"seed={self.seed}")
        return f"{self.op}({', '.join(parts)})"

    __repr__ = describe

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.describe())


def input_seed(seed: int, rank: int, slot: int) -> int:
    """The seed of rank ``rank``'s input tensor number ``slot``, the same in every process."""
    return _mix_seed(seed, rank, slot)


def contiguous_spec(spec: TensorSpec, shape: tuple[int, ...] | None = None) -> TensorSpec:
    """``spec`` with another shape (default: its own), contiguous, no storage offset."""
    return replace(spec, shape=spec.shape if shape is None else tuple(shape), layout="contiguous",
                   storage_offset=0)


def input_values(call: OpCall, rank: int, slot: int = 0, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """Rank ``rank``'s input ``slot`` as a contiguous CPU tensor (its logical values)."""
    return contiguous_spec(call.spec, shape).materialize("cpu", input_seed(call.seed, rank, slot))


def chunk_values(call: OpCall, src: int, dst: int) -> torch.Tensor:
    """alltoall: the rows rank ``src`` sends to rank ``dst``."""
    return input_values(call, src, dst, (call.splits[src][dst], *call.spec.shape))


def pack(t: torch.Tensor) -> tuple[str, tuple[int, ...], bytes]:
    """A tensor as (dtype name, shape, raw bytes): every dtype survives pickling this way
    (torch can't unpickle uint16/32/64 tensors)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return str(t.dtype).replace("torch.", ""), tuple(t.shape), flat.view(torch.uint8).numpy().tobytes()


def unpack(packed: tuple[str, tuple[int, ...], bytes]) -> torch.Tensor:
    name, shape, data = packed
    dtype = getattr(torch, name)
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return raw.view(dtype).reshape(shape)
