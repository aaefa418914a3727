"""The options of a conformance check, in one dataclass: what ``check_process_group`` and
``ConformanceSession`` take as keyword arguments, defaulted and validated in one place."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import settings as Settings

from fuzzdist import strategies as fst
from fuzzdist.conformance._checks import all_checks
from fuzzdist.errors import InvalidArgument
from fuzzdist.pool import DEFAULT_TIMEOUT, RankPool

DEFAULT_WORLD_SIZES: tuple[int, ...] = (1, 2, 3)
DEFAULT_MAX_BYTES = 16 * 1024
DEFAULT_FACTORY = "fuzzdist.conformance:gloo"
# The backends a subject can say it wraps (``wraps``), and the factory that builds each as the reference.
WRAPPED_BACKENDS: dict[str, str] = {"gloo": DEFAULT_FACTORY}

PoolsArg = Mapping[int, RankPool] | Callable[[int], RankPool] | None


@dataclass(frozen=True)
class CheckOptions:
    """How to check a ProcessGroup factory; ``check_process_group`` and ``ConformanceSession`` take
    these fields as keyword arguments.

    Attributes:
        world_sizes: the world sizes to check; each example draws one.
        max_examples: examples per check (default: the current Hypothesis
            profile's, or unlimited when ``duration`` is given).
        duration: seconds for the whole check, shared out between the
            checks; a failure found in time is still shrunk.
        ops: the checks to run, from ``ALL_CHECKS`` and any op registered in
            ``OPS`` since (default: all).
        dtypes: the dtypes to probe and fuzz (default: every dtype fuzzdist
            can build on ``device``).
        device: "cpu" or "cuda": the ranks' device (``ctx.device``).
        timeout: seconds one example may take before it is a hang.
        max_bytes: the largest tensor an example uses.
        pools: rank pools to reuse: ``{world_size: RankPool}`` or a callable
            ``world_size -> RankPool`` (default: new pools, closed at the end).
        settings: Hypothesis settings to start from (default: the current
            profile); ``database=None`` and ``derandomize=True`` make a
            check repeatable.
        verbose: let Hypothesis print its own progress and failing examples.
        seed: a Hypothesis seed, for a repeatable run.
        repeat_waits: the async check also calls ``wait()`` again on works
            already waited on (a repeated wait must return within
            ``_rank.REPEAT_WAIT_S``; gloo's send/recv Work blocks on it: known
            torch bug gloo-p2p-second-wait-blocks, counted, not a failure).
        ddp_reorder: the DDP check also runs DDP through a
            ``fuzzdist.toolkit.reorder.ReorderingProcessGroup`` over the group, its
            allreduces completing in a drawn order.
        wraps: the backend the group delegates to (a key of ``WRAPPED_BACKENDS``: "gloo").  A
            failure that one of that backend's known bugs explains is run again on the backend
            itself, on the same ranks; where the backend gives the same result (or fails the
            same way), the failure is a sighting of the known bug, inherited from the backend,
            not a failure of the group.  Anything else stays a failure.
    """

    world_sizes: Iterable[int] = DEFAULT_WORLD_SIZES
    max_examples: int | None = None
    duration: float | None = None
    ops: Iterable[str] | None = None
    dtypes: Iterable[torch.dtype] | None = None
    device: str = "cpu"
    timeout: float = DEFAULT_TIMEOUT
    max_bytes: int = DEFAULT_MAX_BYTES
    pools: PoolsArg = None
    settings: Settings | None = None
    verbose: bool = False
    seed: int | None = None
    repeat_waits: bool = True
    ddp_reorder: bool = False
    wraps: str | None = None

    @classmethod
    def of(cls, options: CheckOptions | None, fields: Mapping[str, Any]) -> CheckOptions:
        """``options`` (default: every default) with ``fields`` replaced; a TypeError names a field
        that does not exist, as a call with an unknown keyword argument would."""
        return dataclasses.replace(options if options is not None else cls(), **fields)

    def checked(self) -> CheckOptions:
        """These options with their collections as tuples (``ops``: every check, ``dtypes``: every dtype
        the device holds, where not given), or an InvalidArgument naming the first bad one."""
        sizes = tuple(sorted(set(self.world_sizes)))
        if not sizes or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in sizes):
            raise InvalidArgument(f"world_sizes must be positive ints, got {tuple(self.world_sizes)!r}")
        max_examples = self.max_examples
        if max_examples is not None and (not isinstance(max_examples, int) or max_examples < 1):
            raise InvalidArgument(f"max_examples must be a positive int, got {max_examples!r}")
        if self.duration is not None and not self.duration > 0:
            raise InvalidArgument(f"duration must be a positive number of seconds, got {self.duration!r}")
        kinds = dtype_kinds(self.device)
        dtypes = tuple(kinds) if self.dtypes is None else tuple(self.dtypes)
        unknown = [d for d in dtypes if d not in kinds]
        if unknown:
            raise InvalidArgument(f"dtypes {unknown} can't be built on {self.device!r}; choose from {tuple(kinds)}")
        if self.wraps is not None and self.wraps not in WRAPPED_BACKENDS:
            raise InvalidArgument(
                f"wraps={self.wraps!r}: fuzzdist can run as a reference only "
                f"{', '.join(WRAPPED_BACKENDS)}; leave it out for another backend"
            )
        known = all_checks()
        checks = tuple(known if self.ops is None else self.ops)
        unknown_checks = [c for c in checks if c not in known]
        if unknown_checks:
            raise InvalidArgument(f"unknown checks {unknown_checks}; choose from {', '.join(known)}")
        return dataclasses.replace(
            self,
            world_sizes=sizes,
            ops=checks,
            dtypes=dtypes,
            timeout=float(self.timeout),
            max_bytes=int(self.max_bytes),
        )


def dtype_kinds(device: str) -> dict[torch.dtype, str]:
    """Every dtype fuzzdist can build on ``device``, with its kind (``fuzzdist.strategies.DTYPE_KINDS``)."""
    kinds = {}
    for kind in fst.DTYPE_KINDS:
        for dtype in fst.supported_dtypes(device, kind):
            kinds[dtype] = kind
    return kinds
