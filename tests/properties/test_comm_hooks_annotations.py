"""Every hook the comm-hooks family registers passes ``register_comm_hook``'s signature check: its ``bucket``
parameter is annotated ``dist.GradBucket`` itself, not the string a ``from __future__ import annotations``
module leaves (DDP refuses that: "bucket annotation should be dist.GradBucket")."""

from __future__ import annotations

import inspect

import pytest
import torch.distributed as dist

from fuzzdist.properties.comm_hooks.compression import COMPRESSION_HOOKS


@pytest.mark.parametrize("name", sorted(COMPRESSION_HOOKS))
def test_each_compression_hook_is_annotated_as_ddp_checks(name):
    hook, _ = COMPRESSION_HOOKS[name]
    annotation = inspect.signature(hook).parameters["bucket"].annotation
    assert annotation is inspect.Parameter.empty or annotation is dist.GradBucket, (name, annotation)
