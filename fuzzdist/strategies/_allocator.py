"""Allocator modes: the settings that change how tensor memory is allocated
and shared between processes, and ``allocator_modes()``.

CPU: the ``torch.multiprocessing`` sharing strategies.

CUDA: the caching allocator's runtime settings, applied with the setter torch
exposes for ``PYTORCH_CUDA_ALLOC_CONF``/``PYTORCH_ALLOC_CONF`` syntax
(``torch._C._accelerator_setAllocatorSettings`` on recent torch,
``torch._C._cuda_cudaCachingAllocator_set_allocator_settings`` before; both
feature-detected). The environment variable is only read when the allocator
config is first used, so a mode applied inside an already-running worker has
to go through that setter.

Facts about the setter this module relies on (c10 AllocatorConfig parseArgs):
each call re-parses a whole settings string; ``max_split_size_mb``,
``roundup_power2_divisions`` and ``garbage_collection_threshold`` fall back to
their defaults when the string omits them, but ``expandable_segments`` keeps
its last value. Settings only affect segments allocated afterwards, so a mode
empties the cache (if CUDA is initialized) on the way in and on the way out.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from hypothesis import strategies as st

from fuzzdist.errors import InvalidArgument, InvalidState, InvalidStrategyArgument

# ---------------------------------------------------------------------------
# CPU: sharing strategies


def _sharing_strategies() -> tuple[str, ...]:
    import torch.multiprocessing as mp

    available = set(mp.get_all_sharing_strategies())
    # file_descriptor is torch's default on Linux: it goes first, so shrinking
    # lands on the default behaviour.
    preferred = ("file_descriptor", "file_system")
    return tuple(s for s in preferred if s in available) + tuple(sorted(available - set(preferred)))


@dataclass(frozen=True)
class SharingStrategyMode:
    """A ``torch.multiprocessing`` sharing strategy for CPU tensors."""

    strategy: str

    @property
    def device(self) -> str:
        return "cpu"

    @contextlib.contextmanager
    def applied(self) -> Iterator[SharingStrategyMode]:
        """Use this sharing strategy inside the block; restore the previous one after."""
        import torch.multiprocessing as mp

        previous = mp.get_sharing_strategy()
        mp.set_sharing_strategy(self.strategy)
        try:
            yield self
        finally:
            mp.set_sharing_strategy(previous)

    def is_active(self) -> bool:
        import torch.multiprocessing as mp

        return mp.get_sharing_strategy() == self.strategy

    def __repr__(self) -> str:
        return f"SharingStrategyMode({self.strategy!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis prints dataclasses field by field unless told otherwise;
        # the short repr keeps shrunk failures readable.
        printer.text(repr(self))


# ---------------------------------------------------------------------------
# CUDA: caching allocator settings


class _AllocatorApi(NamedTuple):
    get: Callable[[], str]
    set: Callable[[str], None]


def _env_settings() -> str:
    # what the allocator was configured with at start-up (used only where
    # torch has no getter for the current settings)
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        value = os.environ.get(var)
        if value is not None:
            return value
    return ""


def _allocator_api() -> _AllocatorApi | None:
    """The runtime getter/setter for the allocator settings string, or None."""
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:
        setter = getattr(torch._C, "_cuda_cudaCachingAllocator_set_allocator_settings", None)
    if setter is None:
        return None
    getter = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    return _AllocatorApi(getter if getter is not None else _env_settings, setter)


def _split_top_level(text: str) -> list[str]:
    """Split ``a:1,b:[x:1,y:2]`` at the commas outside brackets."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]


def _parse_settings(text: str) -> dict[str, str]:
    settings: dict[str, str] = {}
    for item in _split_top_level(text):
        key, _, value = item.partition(":")
        settings[key.strip()] = value.strip()
    return settings


def _format_settings(settings: dict[str, str]) -> str:
    return ",".join(f"{k}:{v}" for k, v in settings.items())


def _format_value(value: bool | int | float) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return repr(value)


# what the allocator uses for a key the settings string leaves out
_DEFAULTS = {"expandable_segments": "False"}
# smallest max_split_size_mb c10 accepts: the large-segment size, 20 MiB by default
_MIN_SPLIT_MB = 20


def _release_cached_blocks() -> None:
    # ipc_collect first: blocks shared over CUDA IPC wait in torch's hold queue
    # until every receiver let go, and empty_cache can't release them before;
    # left there, a later example's tensor could land in a segment made under
    # this example's settings.
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_available() and cuda.is_initialized():
            cuda.synchronize()
            cuda.ipc_collect()
            cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort; the settings still change
        pass


def inherited_allocator_settings() -> dict[str, str]:
    """The allocator settings in force now, as key -> value strings: torch's runtime getter where it
    has one (it knows which environment variable torch read), else the environment variable.

    What a mode that leaves a setting as ``None`` inherits, ``PYTORCH_CUDA_ALLOC_CONF`` included.
    """
    api = _allocator_api()
    try:
        text = api.get() if api is not None else _env_settings()
    except Exception:  # noqa: BLE001 - a getter that fails: fall back to what the process started with
        text = _env_settings()
    return _parse_settings(text)


@dataclass(frozen=True)
class CudaAllocatorMode:
    """Settings for the CUDA caching allocator; ``None`` leaves one as it is.

    ``expandable_segments`` changes how CUDA memory is mapped and therefore
    how it is shared between processes (IPC of expandable segments goes
    through a different path); ``max_split_size_mb`` (>= 20) and
    ``roundup_power2_divisions`` (a power of two) change how blocks are split
    and rounded, which shifts where tensors land in memory.
    ``garbage_collection_threshold`` (in (0, 1)) is accepted and applied, but
    the allocator only acts on it once a per-process memory fraction is set
    (``torch.cuda.set_per_process_memory_fraction``), which a mode does not
    do, so ``allocator_modes`` never draws it.
    """

    expandable_segments: bool | None = None
    max_split_size_mb: int | None = None
    roundup_power2_divisions: int | None = None
    garbage_collection_threshold: float | None = None

    def __post_init__(self) -> None:
        if self.max_split_size_mb is not None and self.max_split_size_mb < _MIN_SPLIT_MB:
            raise InvalidArgument(f"max_split_size_mb must be >= {_MIN_SPLIT_MB}")
        div = self.roundup_power2_divisions
        if div is not None and (div < 1 or div & (div - 1)):
            raise InvalidArgument("roundup_power2_divisions must be a power of two")
        gc = self.garbage_collection_threshold
        if gc is not None and not 0.0 < gc < 1.0:
            raise InvalidArgument("garbage_collection_threshold must be in (0, 1)")

    @property
    def device(self) -> str:
        return "cuda"

    def settings(self) -> dict[str, str]:
        """The allocator settings this mode sets, as key -> value strings."""
        fields = {
            "expandable_segments": self.expandable_segments,
            "max_split_size_mb": self.max_split_size_mb,
            "roundup_power2_divisions": self.roundup_power2_divisions,
            "garbage_collection_threshold": self.garbage_collection_threshold,
        }
        return {k: _format_value(v) for k, v in fields.items() if v is not None}

    def effective_expandable_segments(self, inherited: dict[str, str] | None = None) -> bool:
        """Whether memory allocated under this mode comes from expandable segments: the drawn value,
        or for ``None`` the inherited setting (``inherited``, by default
        :func:`inherited_allocator_settings`), whose default is off."""
        if self.expandable_segments is not None:
            return self.expandable_segments
        settings = inherited_allocator_settings() if inherited is None else inherited
        return settings.get("expandable_segments", _DEFAULTS["expandable_segments"]) == "True"

    def settings_string(self) -> str:
        """This mode in ``PYTORCH_CUDA_ALLOC_CONF`` syntax ('' for no change)."""
        return _format_settings(self.settings())

    @contextlib.contextmanager
    def applied(self) -> Iterator[CudaAllocatorMode]:
        """Apply these settings inside the block (on top of the current ones)
        and restore the previous settings string after, even on error.

        Use inside a worker, around one example, on every rank. Cached free
        blocks are released on entry and exit (when CUDA is initialized) so
        new allocations really use the settings. A mode with no settings
        changes nothing and needs no allocator API.
        """
        ours = self.settings()
        if not ours:
            yield self
            return
        api = _allocator_api()
        if api is None:
            raise InvalidState("this torch has no runtime allocator-settings setter")
        previous = api.get()
        previous_items = _parse_settings(previous)
        merged = {**previous_items, **ours}
        try:
            _release_cached_blocks()
            api.set(_format_settings(merged))
            yield self
        finally:
            _release_cached_blocks()
            # expandable_segments survives a settings string that omits it:
            # put its previous value back explicitly first
            if "expandable_segments" in ours and "expandable_segments" not in previous_items:
                api.set("expandable_segments:" + _DEFAULTS["expandable_segments"])
            api.set(previous)

    def is_active(self) -> bool:
        """Whether the allocator's current settings include this mode's.

        Reads the settings torch reports (feature-detected); this says what
        the allocator is configured to do, e.g. that expandable segments are
        on, not whether the platform honours it (torch warns and falls back
        where the driver lacks the API).
        """
        ours = self.settings()
        if not ours:
            return True
        api = _allocator_api()
        if api is None:
            raise InvalidState("this torch exposes no allocator settings to read")
        current = _parse_settings(api.get())
        return all(current.get(k, _DEFAULTS.get(k)) == v for k, v in ours.items())

    def __repr__(self) -> str:
        fields = (
            "expandable_segments",
            "max_split_size_mb",
            "roundup_power2_divisions",
            "garbage_collection_threshold",
        )
        args = ", ".join(f"{f}={getattr(self, f)!r}" for f in fields if getattr(self, f) is not None)
        return f"CudaAllocatorMode({args})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis prints dataclasses field by field unless told otherwise;
        # the short repr keeps shrunk failures readable.
        printer.text(repr(self))


AllocatorMode = SharingStrategyMode | CudaAllocatorMode


def _min_split_mb() -> int:
    api = _allocator_api()
    if api is None:
        return _MIN_SPLIT_MB
    try:
        large = _parse_settings(api.get()).get("large_segment_size_mb")
        return max(_MIN_SPLIT_MB, int(large)) if large else _MIN_SPLIT_MB
    except Exception:  # noqa: BLE001
        return _MIN_SPLIT_MB


def allocator_modes(device: str | torch.device = "cpu") -> st.SearchStrategy[AllocatorMode]:
    """Allocator modes for ``device`` ("cpu" or "cuda"), each a frozen
    dataclass with ``applied()`` (a context manager a worker wraps around one
    example on every rank; it undoes itself after) and ``is_active()``.

    ``"cpu"``: every strategy in
    ``torch.multiprocessing.get_all_sharing_strategies()`` (``file_descriptor``,
    ``file_system``). Shrinks to ``SharingStrategyMode("file_descriptor")``,
    torch's Linux default.

    ``"cuda"``: expandable segments unchanged/off/on, combined with
    ``max_split_size_mb`` and ``roundup_power2_divisions`` (not
    ``garbage_collection_threshold``: the caching allocator only collects when
    a per-process memory fraction is set, and a fraction small enough for the
    threshold to be reached would make the properties' own allocations run
    out of memory). Only if the installed torch has a runtime
    settings setter (feature-detected); otherwise only the no-change mode.
    Builds values without a GPU. Shrinks to ``CudaAllocatorMode()``, which
    leaves the allocator as configured.
    """
    try:
        dev_type = torch.device(device).type
    except (RuntimeError, TypeError) as exc:
        raise InvalidStrategyArgument(f"not a torch device: {device!r}") from exc
    if dev_type == "cpu":
        return st.sampled_from(_sharing_strategies()).map(SharingStrategyMode)
    if dev_type == "cuda":
        if _allocator_api() is None:
            return st.just(CudaAllocatorMode())
        min_split = _min_split_mb()
        return st.builds(
            CudaAllocatorMode,
            expandable_segments=st.sampled_from([None, False, True]),
            max_split_size_mb=st.sampled_from([None, min_split, max(min_split, 256)]),
            roundup_power2_divisions=st.sampled_from([None, 1, 4, 16]),
        )
    raise InvalidStrategyArgument(f"allocator_modes supports 'cpu' and 'cuda', not {device!r}")
