"""What the installed torch's gloo takes: its dtypes, ReduceOps and functional collectives' input layouts.

The tables name what fuzzdist asks about; the answers are asked of torch, not assumed from its version,
by one probe in a fresh interpreter (:mod:`fuzzdist.pool.capabilities.gloo_probe`, about 2 s), run on
the first question and kept for the process.  Where the probe gives no answer, each function answers
with the widest set and a warning: a refused value then shows as a property's failure, never as inputs
silently left out.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch

from fuzzdist import fresh_interpreter
from fuzzdist.errors import InvalidArgument

# Element types gloo carries (ProcessGroupGloo's type dispatch; complex travels as real pairs where
# torch's Python layer views it so).  Not int16, not uint16/32/64, not float8: gloo raises "Invalid
# scalar type" for those.  The most any gloo path carries: send/recv (which move bytes, and view complex
# as real) carry all of them on every torch fuzzdist was run on (2.6.0, 2.13.0, 2.14.1), and the p2p
# property draws them all.  Whether the collectives carry complex depends on the torch: see gloo_dtypes.
GLOO_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
)

# What gloo_dtypes answers for: c10d's broadcast, the functional collectives (their all_reduce stands for
# them all), DTensor's distribute_tensor and redistribute.
GLOO_APIS = ("broadcast", "functional", "dtensor")

# The ReduceOps gloo_reduce_ops answers within, in shrink order: SUM first.  PREMUL_SUM is left out: it
# is documented for NCCL only, and takes a factor (``_make_nccl_premul_sum``).
GLOO_REDUCE_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")

# What gloo_reduce_ops answers for: c10d's all_reduce and reduce, and the functional all_reduce.
GLOO_REDUCE_APIS = ("all_reduce", "reduce", "functional")

# The functional collectives functional_layouts answers for (those the installed torch has), and the memory
# layouts it answers within (fuzzdist.strategies.LAYOUTS: "sliced" is contiguous at a storage offset).
FUNCTIONAL_OPS = (
    "all_reduce",
    "all_gather_single",
    "all_gather_tensor",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "broadcast",
    "all_to_all_single",
)
FUNCTIONAL_LAYOUTS = ("contiguous", "sliced", "transposed", "channels_last")

# The probe program, run with ``python -m``.
PROBE_MODULE = "fuzzdist.pool.capabilities.gloo_probe"
PROBE_TIMEOUT = 180  # seconds: it imports torch, generous for a loaded machine


@functools.cache
def gloo_dtypes(api: str) -> tuple[torch.dtype, ...]:
    """The dtypes of :data:`GLOO_DTYPES` (in its order) that ``api``, one of :data:`GLOO_APIS`, carries
    over gloo in the installed torch: what a property over that API draws.

    Asked of torch, not assumed from its version: gloo refuses complex in ``dist.broadcast``,
    ``reduce_scatter_tensor``, the functional collectives and DTensor on torch 2.6.0 ("Invalid scalar
    type"; none of them is documented there to take complex), and takes it on 2.13.0 and 2.14.1.  One
    probe in a fresh interpreter (:mod:`~fuzzdist.pool.capabilities.gloo_probe`, about 2 s, shared with
    :func:`gloo_reduce_ops` and :func:`functional_layouts`), run on the first call and kept for the
    process.  Where the probe gives no answer, the answer is all of ``GLOO_DTYPES`` with a warning: a
    refused dtype then shows as a property's failure, never as inputs silently left out.
    """
    if api not in GLOO_APIS:
        raise InvalidArgument(f"unknown API {api!r} for gloo_dtypes; known: {', '.join(GLOO_APIS)}")
    answer = _probe_gloo_dtypes().get(api)
    if not answer:
        _warn_unanswered(f"which dtypes gloo's {api} takes", api, "every dtype gloo's type dispatch has")
        return GLOO_DTYPES
    return tuple(d for d in GLOO_DTYPES if _dtype_name(d) in answer)


@functools.cache
def gloo_reduce_ops(api: str, dtype: torch.dtype) -> tuple[str, ...]:
    """The ReduceOp names of :data:`GLOO_REDUCE_OPS` (in its order, SUM first) that ``api``, one of
    :data:`GLOO_REDUCE_APIS`, takes over gloo for tensors of ``dtype`` in the installed torch: what a
    property reducing with that API draws.  Empty where gloo refuses ``dtype`` there altogether.

    Asked of torch, not assumed from its version: torch 2.6.0's gloo refuses AVG ("Cannot use
    ReduceOp.AVG with Gloo"; its ``ReduceOp`` docstring says AVG "is only available with the NCCL
    backend", as later ones still do), 2.13.0's and 2.14.1's take it for floating and complex dtypes.
    Every version refuses AVG over integers and bool, PRODUCT/MIN/MAX over complex ("not supported for
    complex tensors", the docstring says) and the bitwise ops over floating dtypes.  The same probe as
    :func:`gloo_dtypes`, run once per process.  Where it gives no answer, the answer is the ops gloo took
    on the newest torch fuzzdist was run on, with a warning: a refused op then shows as a property's
    failure, never as inputs silently left out.
    """
    if api not in GLOO_REDUCE_APIS:
        raise InvalidArgument(f"unknown API {api!r} for gloo_reduce_ops; known: {', '.join(GLOO_REDUCE_APIS)}")
    if not isinstance(dtype, torch.dtype):
        raise InvalidArgument(f"gloo_reduce_ops takes a torch.dtype, got {dtype!r}")
    answer = _probe_gloo_reduce_ops().get(api)
    if not answer:
        _warn_unanswered(f"which ReduceOps gloo's {api} takes", api, "the ones gloo took on torch 2.13")
        return _unprobed_reduce_ops(dtype)
    taken = answer.get(_dtype_name(dtype), [])
    return tuple(op for op in GLOO_REDUCE_OPS if op in taken)


def _unprobed_reduce_ops(dtype: torch.dtype) -> tuple[str, ...]:
    """What gloo took on torch 2.13.0 per kind of dtype: the answer where the probe gave none."""
    if dtype.is_complex:
        return ("SUM", "AVG")
    if dtype.is_floating_point:
        return ("SUM", "AVG", "PRODUCT", "MIN", "MAX")
    return ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


@functools.cache
def functional_layouts(op: str) -> tuple[str, ...]:
    """The memory layouts of :data:`FUNCTIONAL_LAYOUTS` (in its order) that the installed torch's functional
    collective ``op`` (one of :data:`FUNCTIONAL_OPS`) takes as its input over gloo: what a property issuing
    it draws.  Ask only of an op the installed torch has (torch 2.6.0 has no ``all_gather_single``).

    Asked of torch, not assumed from its version: torch 2.6.0's ``all_gather_tensor`` asserts that its
    input is contiguous (``assert self.is_contiguous()``; its docstring says nothing of layouts), and
    takes the contiguous layouts only; 2.13.0's functional collectives take every layout.  The same probe
    as :func:`gloo_dtypes`, run once per process.  Where it gives no answer, the answer is every layout,
    with a warning: a refused layout then shows as a property's failure, never as inputs silently left
    out.
    """
    if op not in FUNCTIONAL_OPS:
        raise InvalidArgument(
            f"unknown functional collective {op!r} for functional_layouts; known: {', '.join(FUNCTIONAL_OPS)}"
        )
    answer = _probe_gloo().get("functional_layouts")
    taken = answer.get(op) if isinstance(answer, dict) else None
    if not isinstance(taken, list):
        _warn_unanswered(f"which layouts its functional {op} takes", op, "every layout")
        return FUNCTIONAL_LAYOUTS
    return tuple(layout for layout in FUNCTIONAL_LAYOUTS if layout in taken)


_PROBE_FAILURE: dict[str, str] = {}  # why the last probe gave no answer, for the warning


def _why_no_answer(asked: str) -> str:
    """Why the probe could not answer for ``asked``: it failed (and how), or it had no entry for it."""
    return _PROBE_FAILURE.get("why", f"the probe had no answer for {asked}")


def _warn_unanswered(question: str, asked: str, drawn: str) -> None:
    """The one warning of a public function the probe gave no answer: the ``question`` it could not ask
    torch, why (:func:`_why_no_answer` for ``asked``), and the fallback ``drawn`` instead.  Attributed to
    the public function's caller (``functools.cache`` adds no frame)."""
    warnings.warn(
        f"could not ask torch {torch.__version__} {question} ({_why_no_answer(asked)}); drawing {drawn}",
        stacklevel=3,
    )


def _dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``float32``: the name the probe is given and answers with."""
    return str(dtype).removeprefix("torch.")


@functools.cache
def _probe_gloo() -> dict[str, Any]:
    """Run the probe once: its answer ({} where it failed, the reason in _PROBE_FAILURE)."""
    _PROBE_FAILURE.pop("why", None)  # a reason left by an earlier run (its cache cleared) is stale
    answer = fresh_interpreter.ask(
        PROBE_MODULE,
        ",".join(_dtype_name(d) for d in GLOO_DTYPES),
        ",".join(GLOO_REDUCE_OPS),
        ",".join(FUNCTIONAL_OPS),
        timeout=PROBE_TIMEOUT,
    )
    if not answer.given:
        _PROBE_FAILURE["why"] = answer.why
        return {}
    if not isinstance(answer.value, dict):
        _PROBE_FAILURE["why"] = f"the probe printed {answer.value!r}"
        return {}
    return answer.value


def _probe_gloo_dtypes() -> dict[str, list[str]]:
    """The probe's dtypes: API name -> the dtype names it took ({} where the probe failed)."""
    answer = _probe_gloo().get("dtypes")
    if not isinstance(answer, dict):
        return {}
    return {str(k): [str(n) for n in v] for k, v in answer.items() if isinstance(v, list)}


def _probe_gloo_reduce_ops() -> dict[str, dict[str, list[str]]]:
    """The probe's ReduceOps: API name -> dtype name -> the op names it took ({} where the probe failed)."""
    answer = _probe_gloo().get("reduce_ops")
    if not isinstance(answer, dict):
        return {}
    return {
        str(api): {str(n): [str(op) for op in ops] for n, ops in per_dtype.items() if isinstance(ops, list)}
        for api, per_dtype in answer.items()
        if isinstance(per_dtype, dict)
    }
