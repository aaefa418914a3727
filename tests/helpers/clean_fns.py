"""Rank functions that change process-global state an example should not pass on, and ones that look at it.

Each ``change_*`` leaves something behind on purpose; the matching
``observe_*`` reports it in plain values, so a test can compare the next
example with the one before.
"""

from __future__ import annotations

import logging
import threading

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _world  # the tests' view of c10d's group registry

import fuzzdist

_CACHED: dict[str, object] = {}


# -- logging


def _logger_view(lg: logging.Logger) -> dict:
    return {
        "level": lg.level,
        "propagate": lg.propagate,
        "disabled": lg.disabled,
        "handlers": [type(h).__name__ for h in lg.handlers],
        "filters": len(lg.filters),
    }


def observe_logging(ctx):
    """The settings of the root, torch.distributed's and a test logger (made here if missing)."""
    names = ("torch.distributed", "fuzzdist.test.before")
    return {
        "root": _logger_view(logging.getLogger()),
        **{name: _logger_view(logging.getLogger(name)) for name in names},
        "disable": logging.root.manager.disable,
        "debug_enabled": logging.getLogger("torch.distributed").isEnabledFor(logging.DEBUG),
    }


def observe_made_logger(ctx):
    """The logger change_logging made (None if it was never made)."""
    lg = logging.root.manager.loggerDict.get("fuzzdist.test.made")
    return _logger_view(lg) if isinstance(lg, logging.Logger) else None


def change_logging(ctx):
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    root.addHandler(logging.StreamHandler())
    c10d = logging.getLogger("torch.distributed")
    c10d.setLevel(logging.DEBUG)
    c10d.propagate = False
    c10d.addFilter(lambda record: True)
    before = logging.getLogger("fuzzdist.test.before")  # made by observe_logging in an earlier example
    before.disabled = True
    before.handlers.append(logging.NullHandler())
    made = logging.getLogger("fuzzdist.test.made")  # a new logger
    made.setLevel(logging.ERROR)
    made.addHandler(logging.NullHandler())
    made.propagate = False
    logging.disable(logging.CRITICAL)
    return {**observe_logging(ctx), "made": observe_made_logger(ctx)}


# -- process groups


def observe_groups(ctx):
    return {
        "groups": sorted(_world.pg_names[pg] for pg in _world.pg_map),
        "default_is_world": dist.group.WORLD is ctx.group,
        "debug_level": str(dist.get_debug_level()),
    }


def change_groups(ctx):
    """Every rank creates the same groups: c10d's collectives."""
    from torch.distributed.device_mesh import init_device_mesh

    everyone = dist.new_group()
    dist.new_group(ranks=[0])  # rank 1 is no member: it gets no group
    before_mesh = len(_world.pg_map)
    mesh = init_device_mesh("cpu", (ctx.world_size, 1))  # one sub-group per rank on its size-1 dimension
    t = torch.ones(2)
    dist.all_reduce(t, group=everyone)
    dist.all_reduce(t, group=mesh.get_group(1))
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    # The mesh's groups, as this torch makes them: a dimension spanning the world reuses the default group
    # (torch 2.13) or gets a group of its own (torch 2.6).
    mesh_groups = len(_world.pg_map) - before_mesh
    return {
        **observe_groups(ctx),
        "mesh_groups": mesh_groups,
        "mesh_reuses_world": any(g is dist.group.WORLD for g in mesh.get_all_groups()),
    }


def cache_kept_group(ctx):
    if "group" not in _CACHED:
        with fuzzdist.keep_process_groups():
            _CACHED["group"] = dist.new_group()
    t = torch.full((2,), float(ctx.rank))
    dist.all_reduce(t, group=_CACHED["group"])
    return t.tolist()


def keep_then_raise(ctx):
    with fuzzdist.keep_process_groups():
        dist.new_group()
        raise RuntimeError("planted: the block raises after creating a group")


def create_group_unlisted(ctx):
    """A group created where fuzzdist can't list the groups (a torch that keeps them elsewhere)."""
    from fuzzdist.pool.rank import isolation as _isolation

    _isolation._registered_groups = lambda: None  # this process is recycled: nothing else sees it
    dist.new_group()
    return True


class _NeverDestroyed:
    """Stands for a group whose destructor waits for a Work that never ends."""

    def __del__(self):
        threading.Event().wait(60)  # longer than the test needs: the rank is recycled first


def create_group_with_reaper_stuck(ctx):
    """A group created while the reaper is stuck in an earlier group's destructor."""
    from fuzzdist.pool.rank import isolation as _isolation

    _isolation._REAP_BACKLOG, _isolation._REAP_WAIT_S = 0, 0.1  # this process is recycled: nothing else sees it
    _isolation._REAPER.drop([_NeverDestroyed()])
    dist.new_group()
    return True


def destroy_default_group(ctx):
    dist.destroy_process_group()
    return True


# -- hooks


class _Seen:
    calls: list[str] = []


def _forward_hook(module, args, output):
    _Seen.calls.append("forward")


def _forward_pre_hook(module, args):
    _Seen.calls.append("forward_pre")


def _full_backward_hook(module, grad_input, grad_output):
    _Seen.calls.append("full_backward")


def _optimizer_pre_hook(optimizer, args, kwargs):
    _Seen.calls.append("optimizer_pre")


def _pack(t):
    _Seen.calls.append("pack")
    return t


def _unpack(t):
    return t


def observe_hooks(ctx):
    """Train a tiny model one step and report which global hooks ran, and what is left on torch's stacks."""
    from torch.nn.modules.module import register_module_backward_hook

    _Seen.calls.clear()
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    # a non-full global backward hook: refused while a full one is registered
    register_module_backward_hook(_full_backward_hook).remove()
    return {
        "calls": sorted(set(_Seen.calls)),
        "saved_tensor_hooks": _saved_tensor_hooks_in_force(),
        "saved_tensor_hooks_disabled": torch._C._autograd._saved_tensors_hooks_get_disabled_error_message(),
        "dispatch_modes": torch._C._len_torch_dispatch_stack(),
        "function_modes": torch._C._len_torch_function_stack(),
    }


def _saved_tensor_hooks_in_force() -> bool:
    """Read from the top of torch's stack where a torch shows it; elsewhere (torch 2.6 has no
    _top_saved_tensors_default_hooks) seen on a tensor saved now: one that got hooks refuses more."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    if top is not None:
        return top(True) is not None
    with torch.enable_grad():
        y = torch.ones(1, requires_grad=True).sin()  # y keeps the saved tensor alive while it is looked at
    try:
        y.grad_fn._raw_saved_self.register_hooks(_unpack, _unpack)
    except RuntimeError as exc:
        if "hooks have already been set" not in str(exc):
            raise
        return True
    return False


class _PassThrough(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def change_hooks(ctx):
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.nn.modules import module
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    module.register_module_forward_hook(_forward_hook)
    module.register_module_forward_pre_hook(_forward_pre_hook)
    module.register_module_full_backward_hook(_full_backward_hook)
    register_optimizer_step_pre_hook(_optimizer_pre_hook)
    torch.autograd.graph.saved_tensors_hooks(_pack, _unpack).__enter__()  # entered, never left
    CommDebugMode().__enter__()
    _PassThrough().__enter__()
    _Seen.calls.clear()
    model = torch.nn.Linear(2, 2)
    model(torch.ones(1, 2, requires_grad=True)).sum().backward()
    return sorted(set(_Seen.calls))


def disable_saved_tensor_hooks(ctx):
    disabled = torch.autograd.graph.disable_saved_tensors_hooks("disabled by an earlier example")
    disabled.__enter__()
    _CACHED["disabled"] = disabled  # held: a collected generator would leave the block itself
    return torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()


def bury_function_mode(ctx):
    """A torch function mode left entered under a DeviceContext (set_default_device's mode, not fuzzdist's to pop)."""
    from torch.utils._device import DeviceContext

    _PassThrough().__enter__()
    torch._C._push_on_torch_function_stack(DeviceContext("cpu"))  # set_default_device would put it underneath
    return torch._C._len_torch_function_stack()
