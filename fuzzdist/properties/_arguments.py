"""Checks of the arguments the training properties' ``check`` functions share, made before any rank runs."""

from __future__ import annotations

import torch

from fuzzdist.errors import InvalidArgument


def check_model_dtype_and_seed(dtype: object, seed: object) -> None:
    """InvalidArgument unless ``dtype`` is a floating-point torch.dtype (the model's) and ``seed`` an int."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise InvalidArgument(f"dtype must be a floating-point torch.dtype (the model's), got {dtype!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"seed must be an int, got {seed!r}")
