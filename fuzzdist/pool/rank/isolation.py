"""Every example starts clean: seed the RNGs, snapshot global state, restore it after.

Runs inside a rank process, around each call of ``fn``.  What can be put
back is put back; what can't (allocator settings that are read once, a
destroyed default group) is reported so the pool recycles the process.

Snapshots are taken on every example (thousands a minute), so each is a
cheap copy compared after the call, and restoring touches only what changed.
torch has no public API to list its process groups or its global hook
registries: the few private names read here are resolved in one place each
(:func:`_registered_groups`, :data:`_HOOK_REGISTRIES`, :data:`_AUTOGRAD`), and
a torch without them is handled by skipping or recycling, never by failing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.multiprocessing as tmp

# Seeding lives with the standalone reproducer, so that an exported script seeds as the ranks do.
from fuzzdist.pool.rank.standalone import seed_everything as seed_everything

# Read once by the CUDA caching allocator at start-up: changing them in an
# example can't be undone in place, so the rank process is recycled.
_UNDOABLE_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")

_get_default_device: Callable[[], torch.device] | None = getattr(torch, "get_default_device", None)
# Where torch.set_default_device keeps its choice (private; this is the one place it is read).  With
# nothing there and no torch function mode entered, the default device is the CPU: known without
# calling get_default_device (~6 us, twice an example).  A torch without it always calls it.
_DEVICE_CONTEXT = getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None)


def _environ_snapshot() -> dict[Any, Any]:
    # os.environ's raw dict: a plain copy costs ~1us, against ~25us for
    # os.environ.copy(), which decodes every entry.  Falls back where absent.
    raw = getattr(os.environ, "_data", None)
    return raw.copy() if isinstance(raw, dict) else dict(os.environ)


def _decode(snapshot: dict[Any, Any]) -> dict[str, str]:
    if isinstance(os.environ.get("PATH", ""), str) and snapshot and isinstance(next(iter(snapshot)), bytes):
        return {os.fsdecode(k): os.fsdecode(v) for k, v in snapshot.items()}
    return dict(snapshot)


# ---------------------------------------------------------------------------
# logging: every logger's level, handlers, filters, propagate and disabled flags

_MANAGER = logging.Logger.manager
_PLACEHOLDER = logging.PlaceHolder
_FRESH_LOGGER = (logging.NOTSET, True, False, (), ())  # what getLogger() gives a new name
_loggers_seen: tuple[list[Any] | None, list[logging.Logger]] = (None, [])  # loggerDict's values, the loggers


def _loggers() -> list[logging.Logger]:
    """The root and every named logger; the same list object while no logger is added (the usual case)."""
    global _loggers_seen
    values: list[Any] = list(_MANAGER.loggerDict.values())
    if values != _loggers_seen[0]:  # identity comparisons, in C
        _loggers_seen = (values, [logging.root, *(lg for lg in values if lg.__class__ is not _PLACEHOLDER)])
    return _loggers_seen[1]


def _logger_states(loggers: list[logging.Logger]) -> list[tuple[Any, ...]]:
    """``(level, propagate, disabled, handlers, filters)`` of each logger, the lists copied into tuples.

    One pass of ~110 loggers once torch is imported: the bulk of a snapshot's cost.  (A listcomp:
    Python 3.11 specialises its attribute reads; ``map(operator.attrgetter(...))`` measured slower.)
    """
    return [
        (
            lg.level,
            lg.propagate,
            lg.disabled,
            tuple(lg.handlers) if lg.handlers else (),
            tuple(lg.filters) if lg.filters else (),
        )
        for lg in loggers
    ]


_logging_baseline: tuple[list[logging.Logger] | None, list[tuple[Any, ...]]] = (None, [])


def _logging_snapshot() -> tuple[list[logging.Logger], list[tuple[Any, ...]]]:
    """The loggers and their states before an example.

    Reused while the logger list is the same object: ``_restore_logging`` puts every logger back to
    this snapshot after each example, so it still holds, and an example pays one pass over the
    loggers (the comparison in restore) instead of two.  Measured: a pass is ~15-35 us, the bulk of
    the guard's cost, on every rank, on the critical path of every example.
    """
    global _logging_baseline
    loggers = _loggers()
    if _logging_baseline[0] is not loggers:
        _logging_baseline = (loggers, _logger_states(loggers))
    return loggers, _logging_baseline[1]


def _set_logger(
    lg: logging.Logger,
    level: int,
    propagate: bool,
    disabled: bool,
    handlers: tuple[logging.Handler, ...],
    filters: tuple[Any, ...],
) -> None:
    if lg.level != level:
        lg.setLevel(level)  # also drops every logger's cached isEnabledFor answers
    lg.propagate, lg.disabled = propagate, disabled
    if tuple(lg.handlers) != handlers:
        lg.handlers[:] = handlers  # in place: code may hold the list
    if tuple(lg.filters) != filters:
        lg.filters[:] = filters


def _restore_logging(loggers: list[logging.Logger], states: list[tuple[Any, ...]], disable: int) -> None:
    """Loggers that existed go back to their settings; loggers made in the example to a fresh logger's."""
    if _MANAGER.disable != disable:
        logging.disable(disable)
    now = _loggers()
    if now is loggers and _logger_states(loggers) == states:
        return
    for lg, state in zip(loggers, states, strict=True):
        _set_logger(lg, *state)
    if now is not loggers:
        existed = set(loggers)
        for lg in now:
            if lg not in existed:
                _set_logger(lg, *_FRESH_LOGGER)


# ---------------------------------------------------------------------------
# process groups: the ones an example creates are destroyed after it

_KEPT: weakref.WeakSet[Any] = weakref.WeakSet()  # created under keep_process_groups(): they outlive examples
_REAP_BACKLOG = 8  # examples' groups the reaper may lag behind before an example waits for it
_REAP_WAIT_S = 10.0  # how long an example waits for it before its rank is recycled instead


def _registered_groups() -> dict[Any, Any] | None:
    """Every process group torch.distributed knows in this process (the keys), or None where it can't be read.

    torch 2.13 has no public API that lists process groups.  ``_world.pg_map``
    is distributed_c10d's own registry, the one ``destroy_process_group``
    updates; this is the one place fuzzdist reads it.  Where a torch keeps
    it elsewhere, groups created in an example recycle the rank instead.
    """
    if not torch.distributed.is_available():
        return {}
    pg_map = getattr(getattr(torch.distributed.distributed_c10d, "_world", None), "pg_map", None)
    return pg_map if isinstance(pg_map, dict) else None


def _default_group() -> Any:
    return torch.distributed.group.WORLD if torch.distributed.is_available() else None


def _default_device() -> torch.device | None:
    """torch's default device; without the call where nothing can have set one (see _DEVICE_CONTEXT)."""
    if _get_default_device is None:
        return None
    if (
        _DEVICE_CONTEXT is not None
        and getattr(_DEVICE_CONTEXT, "device_context", None) is None
        and _function_depth is not None
        and _function_depth() == 0
    ):
        return _CPU
    return _get_default_device()


def _debug_level() -> Any:
    return torch.distributed.get_debug_level() if torch.distributed.is_available() else None


@contextlib.contextmanager
def keep_process_groups() -> Iterator[None]:
    """Process groups created inside this block outlive the example: they are not destroyed after it.

    For a cache that lives as long as the rank process, such as one
    ``DeviceMesh`` per shape (a 2-D mesh creates sub-groups, a collective,
    and is worth building once)::

        with fuzzdist.keep_process_groups():
            mesh = init_device_mesh("cpu", (2, 2))

    Groups created outside such a block are destroyed after the example
    that created them.  If the block raises, its groups are not kept.
    """
    groups = _registered_groups()
    before = set(groups) if groups else set()
    yield
    groups = _registered_groups()
    if groups:
        _KEPT.update(pg for pg in groups if pg not in before)


class _Reaper:
    """Drops destroyed process groups on a thread of its own, so that their destructors run there.

    The reaper drops each example's groups one example late (see ``_run``).
    A group's destructor waits for its Works: ~20 ms for an idle gloo group,
    and for a Work an example left pending, until the peers destroy their
    side.  The example's thread waits only when the backlog is long, and
    for a bounded time: a backlog that doesn't drain (Works that never end)
    recycles the rank instead.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[Any]] = queue.SimpleQueue()
        self._drained = threading.Condition()
        self._thread: threading.Thread | None = None
        self.backlog = 0  # lists of groups handed over and not yet dropped

    def drop(self, groups: list[Any]) -> None:
        """Take the last references to ``groups``: the caller must keep none."""
        with self._drained:
            self.backlog += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="fuzzdist-group-reaper", daemon=True)
                self._thread.start()
        self._queue.put(groups)

    def settle(self, limit: int, timeout: float) -> bool:
        """Wait until at most ``limit`` lists are left, for up to ``timeout`` seconds; whether they are."""
        with self._drained:
            return self._drained.wait_for(lambda: self.backlog <= limit, timeout)

    def _run(self) -> None:
        # An example's groups are dropped when the next example's arrive, not at once: on torch 2.6.0 a gloo
        # group's destructor (GIL held) joins its worker threads, and a worker still freeing the Work of a
        # collective that just completed needs the GIL, so the rank froze for good, about once in 30
        # examples (known bug gloo-process-group-drop-deadlocks).  An example later, the workers are idle.
        held: list[Any] = []
        while True:
            groups = self._queue.get()
            held, dropped = groups, held
            dropped.clear()  # the destructors run here
            with self._drained:
                self.backlog -= 1  # the held list counts as dropped: it waits only for the next one
                self._drained.notify_all()


_REAPER = _Reaper()


def _restore_groups(before: tuple[Any, ...] | None, default: Any, count: int, reasons: list[str]) -> None:
    """Destroy the process groups created since ``before``; recycle where that can't be done in place."""
    if not torch.distributed.is_available():
        return
    if _default_group() is not default:
        reasons.append("the example destroyed or replaced the default process group")
        return
    groups = _registered_groups()
    if groups is None or before is None:
        if torch.distributed.get_pg_count() != count:
            reasons.append("the example created process groups this torch can't list to destroy")
        return
    if len(groups) == len(before) and all(pg in groups for pg in before):
        return
    old = set(before)
    created = [pg for pg in groups if pg not in old and pg not in _KEPT]
    if not created:
        return
    for i in reversed(range(len(created))):  # newest first, the same order on every rank
        try:
            torch.distributed.destroy_process_group(created[i])
        except Exception as exc:  # noqa: BLE001 - the process is recycled instead
            reasons.append(
                f"process group {getattr(created[i], 'group_name', '?')} created in the example "
                f"could not be destroyed: {type(exc).__name__}: {exc}"
            )
    _REAPER.drop(created)  # no other reference is left here: the destructors run there
    if not _REAPER.settle(_REAP_BACKLOG, _REAP_WAIT_S):
        reasons.append(
            f"the process groups of {_REAPER.backlog} earlier examples are still being destroyed "
            f"after {_REAP_WAIT_S:g}s: their destructors wait for Works that don't end"
        )


# ---------------------------------------------------------------------------
# hooks: torch's process-wide hook registries, saved-tensor hooks, mode stacks


def _hook_registries() -> tuple[dict[int, Any], ...]:
    """The dicts behind ``torch.nn.modules.module.register_module_*`` and
    ``torch.optim.optimizer.register_optimizer_step_*``.

    They are private (torch has no API to list or clear global hooks);
    their handles remove by key, so they are restored in place.  A name a
    torch lacks is skipped.
    """
    from torch.nn.modules import module
    from torch.optim import optimizer

    names = {
        module: (
            "_global_buffer_registration_hooks",
            "_global_module_registration_hooks",
            "_global_parameter_registration_hooks",
            "_global_backward_pre_hooks",
            "_global_backward_hooks",
            "_global_forward_pre_hooks",
            "_global_forward_hooks",
            "_global_forward_hooks_always_called",
            "_global_forward_hooks_with_kwargs",
        ),
        optimizer: ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"),
    }
    found = (getattr(mod, name, None) for mod, names_ in names.items() for name in names_)
    return tuple(d for d in found if isinstance(d, dict))


_HOOK_REGISTRIES = _hook_registries()
_NO_HOOKS: dict[int, Any] = {}  # the snapshot of an empty registry (never written to)
_MODULE = torch.nn.modules.module
_FULL_BACKWARD = "_global_is_full_backward_hook"  # which kind of global backward hook was registered last


def _private(module: Any, name: str) -> Callable[..., Any] | None:
    return getattr(module, name, None)


# torch._C functions without a public equivalent; None where a torch lacks one (that check is skipped)
_AUTOGRAD = torch._C._autograd
_top_saved_hooks = _private(_AUTOGRAD, "_top_saved_tensors_default_hooks")
_pop_saved_hooks = _private(_AUTOGRAD, "_pop_saved_tensors_default_hooks")
_saved_hooks_message = _private(_AUTOGRAD, "_saved_tensors_hooks_get_disabled_error_message")
_dispatch_depth = _private(torch._C, "_len_torch_dispatch_stack")
_pop_dispatch_mode = _private(torch._C, "_pop_torch_dispatch_stack")
_dispatch_mode_at = _private(torch._C, "_get_dispatch_stack_at")
_function_depth = _private(torch._C, "_len_torch_function_stack")
_function_mode_at = _private(torch._C, "_get_function_stack_at")
_pop_function_mode = _private(torch._C, "_pop_torch_function_stack")
_MAX_POPS = 64
_CPU = torch.device("cpu")


def _saved_hooks_in_force() -> bool | None:
    """Are default saved-tensor hooks in force?  For a torch that can't show the top of their stack
    (``_top_saved_tensors_default_hooks``): a tensor saved now got them, and a saved tensor that has hooks
    refuses more.  None where that can't be seen (inference mode, say).  The hooks in force, if any, pack
    one 1-element tensor."""
    try:
        with torch.enable_grad():
            x = torch.ones(1, requires_grad=True)
            y = x.sin()  # saves x; y keeps its grad_fn, and so the saved tensor, alive while it is looked at
        saved = getattr(y.grad_fn, "_raw_saved_self", None)  # SinBackward's saved input
        if saved is None:
            return None
        try:
            saved.register_hooks(_same, _same)
        except RuntimeError as exc:
            if "hooks have already been set" in str(exc):
                return True
            return None
        return False
    except Exception:  # noqa: BLE001 - a pack hook that raises, a torch that saves differently: unknown
        return None


def _same(t: Any) -> Any:
    return t


def _autograd_state() -> tuple[Any, ...]:
    """The saved-tensor default hooks on top (where a torch can't show them: whether any are in force) and
    the disabled message; the dispatch and function mode depths."""
    return (
        _top_saved_hooks(True) if _top_saved_hooks else _saved_hooks_in_force(),
        _saved_hooks_message() if _saved_hooks_message else None,
        _dispatch_depth() if _dispatch_depth else 0,
        _function_depth() if _function_depth else 0,
    )


def _same_hooks(a: Any, b: Any) -> bool:
    return a is b or (a is not None and b is not None and all(x is y for x, y in zip(a, b, strict=True)))


def _restore_saved_tensor_hooks(top: Any, message: str | None, reasons: list[str]) -> None:
    """Pop the ``saved_tensors_hooks`` an example entered and never left; undo ``disable_saved_tensors_hooks``."""
    if _top_saved_hooks is not None and _pop_saved_hooks is not None:
        for _ in range(_MAX_POPS):
            current = _top_saved_hooks(True)
            if _same_hooks(current, top) or current is None:
                break
            _pop_saved_hooks()
        if not _same_hooks(_top_saved_hooks(True), top):
            reasons.append("the saved-tensor hooks in force before the example can't be put back")
    elif _pop_saved_hooks is not None and top is False:  # none were in force: pop what the example left
        for _ in range(_MAX_POPS):
            if _saved_hooks_in_force() is not True:
                break
            _pop_saved_hooks()
        if _saved_hooks_in_force() is not False:
            reasons.append("the saved-tensor hooks an example left in force can't be taken off")
    if _saved_hooks_message is not None and _saved_hooks_message() != message:
        if message is None:
            _AUTOGRAD._saved_tensors_hooks_enable()
        else:
            _AUTOGRAD._saved_tensors_hooks_disable(message, False)


def _restore_modes(dispatch: int, function: int, reasons: list[str]) -> None:
    """Pop the torch dispatch and function modes an example entered and never left."""
    if _dispatch_depth is not None and _pop_dispatch_mode is not None:
        for _ in range(min(_dispatch_depth() - dispatch, _MAX_POPS)):
            # Held while popped, as a mode's own __exit__ holds itself: on torch 2.6 a mode popped while only
            # the stack held it crashed a later op (SIGSEGV); held, it doesn't.
            held = _dispatch_mode_at(_dispatch_depth() - 1) if _dispatch_mode_at is not None else None
            _pop_dispatch_mode(None)
            del held
        if _dispatch_depth() != dispatch:
            reasons.append("a torch dispatch mode entered in the example can't be left")
    if _function_depth is None or _function_depth() <= function:
        return
    # torch.set_default_device keeps its own DeviceContext on this stack (restored above): leave those.
    from torch.utils._device import DeviceContext

    while _function_depth() > function and _pop_function_mode is not None and _function_mode_at is not None:
        top = _function_mode_at(_function_depth() - 1)
        if isinstance(top, DeviceContext):
            break
        _pop_function_mode()
    if _function_mode_at is not None and any(
        not isinstance(_function_mode_at(i), DeviceContext) for i in range(function, _function_depth())
    ):
        reasons.append("a torch function mode entered in the example can't be left")


class StateGuard:
    """Snapshot of the process-global state an example may change."""

    __slots__ = (
        "env",
        "dtype",
        "grad",
        "sharing",
        "threads",
        "deterministic",
        "anomaly",
        "cwd",
        "default_device",
        "warning_filters",
        "loggers",
        "logger_states",
        "logging_disable",
        "groups",
        "default_group",
        "pg_count",
        "debug_level",
        "hooks",
        "full_backward",
        "autograd",
    )

    def __init__(self) -> None:
        self.env = _environ_snapshot()
        self.dtype = torch.get_default_dtype()
        self.grad = torch.is_grad_enabled()
        self.sharing = tmp.get_sharing_strategy()
        self.threads = torch.get_num_threads()
        self.deterministic = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        )
        self.anomaly = torch.is_anomaly_enabled()
        self.cwd = os.getcwd()
        self.default_device = _default_device()
        self.warning_filters = list(warnings.filters)
        self.loggers, self.logger_states = _logging_snapshot()
        self.logging_disable = _MANAGER.disable
        groups = _registered_groups()
        self.groups = tuple(groups) if groups is not None else None
        self.default_group = _default_group()
        self.pg_count = torch.distributed.get_pg_count() if torch.distributed.is_available() else 0
        self.debug_level = _debug_level()
        self.hooks = [d.copy() if d else _NO_HOOKS for d in _HOOK_REGISTRIES]
        self.full_backward = getattr(_MODULE, _FULL_BACKWARD, None)
        self.autograd = _autograd_state()

    def restore(self) -> list[str]:
        """Put everything back; return what could not be undone (recycle the process)."""
        unrestorable: list[str] = []
        if _environ_snapshot() != self.env:
            before = _decode(self.env)
            for key in _UNDOABLE_ENV:
                if os.environ.get(key) != before.get(key):
                    unrestorable.append(f"environment variable {key} changed")
            os.environ.clear()
            os.environ.update(before)
        if torch.get_default_dtype() != self.dtype:
            torch.set_default_dtype(self.dtype)
        if torch.is_grad_enabled() != self.grad:
            torch.set_grad_enabled(self.grad)
        if tmp.get_sharing_strategy() != self.sharing:
            tmp.set_sharing_strategy(self.sharing)
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        deterministic = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        )
        if deterministic != self.deterministic:
            torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        if torch.is_anomaly_enabled() != self.anomaly:
            torch.set_anomaly_enabled(self.anomaly)
        if os.getcwd() != self.cwd:
            os.chdir(self.cwd)
        if _get_default_device is not None and _default_device() != self.default_device:
            torch.set_default_device(self.default_device)
        if warnings.filters != self.warning_filters:
            warnings.filters[:] = self.warning_filters  # type: ignore[index]  # a list at run time
            mutated = getattr(warnings, "_filters_mutated", None)
            if mutated is not None:
                mutated()  # drop the per-module "already warned" caches
        _restore_logging(self.loggers, self.logger_states, self.logging_disable)
        self._restore_hooks(unrestorable)
        _restore_groups(self.groups, self.default_group, self.pg_count, unrestorable)
        if self.debug_level is not None and _debug_level() != self.debug_level:
            torch.distributed.set_debug_level(self.debug_level)
        return unrestorable

    def _restore_hooks(self, unrestorable: list[str]) -> None:
        for registry, saved in zip(_HOOK_REGISTRIES, self.hooks, strict=True):
            if registry != saved:
                registry.clear()
                registry.update(saved)
        if getattr(_MODULE, _FULL_BACKWARD, None) is not self.full_backward:
            setattr(_MODULE, _FULL_BACKWARD, self.full_backward)
        if _autograd_state() != self.autograd:
            top, message, dispatch, function = self.autograd
            _restore_saved_tensor_hooks(top, message, unrestorable)
            _restore_modes(dispatch, function, unrestorable)
