"""Process-independent seeding: a seeded CPU ``torch.Generator``, never the
global RNG, and a stable way to derive sub-seeds (Python's ``hash`` is salted
per process, so it is never used)."""

from __future__ import annotations

import hashlib

import torch
from hypothesis import strategies as st

_SEED_SPACE = 1 << 64


def seeds() -> st.SearchStrategy[int]:
    """Seeds for building an example's values on the ranks: integers in ``[0, 2**32 - 1]``.

    A property draws one seed in the driver and every rank builds its tensors from it
    (:meth:`TensorSpec.materialize`, :func:`mix_seed` for per-rank or per-step sub-seeds), so an
    example travels as a few small values.  Shrinks towards 0.
    """
    return st.integers(0, 2**32 - 1)


def mix_seed(*parts: int) -> int:
    """A 64-bit seed derived from ``parts`` (a seed, a rank, a step...), identical in every process.

    Python's ``hash`` is salted per process, so it is never used; ``mix_seed(seed, rank)`` gives each
    rank its own stream that every other process can recompute for the reference."""
    text = ",".join(str(int(p)) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def mix_seed_fnv(*parts: int) -> int:
    """A 63-bit seed derived from ``parts``, identical in every process: the older mixer the ZeRO and Join
    properties build their models and batches with (torch's ``manual_seed`` takes it as it is).  Kept, not
    replaced by :func:`mix_seed`, so that a seed stored in a database builds the same model it did."""
    h = 0x9E3779B97F4A7C15
    for v in parts:
        h = ((h ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0x100000001B3 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    return h >> 1


def _generator(seed: int) -> torch.Generator:
    """A fresh CPU generator seeded from ``seed`` (any int).

    torch's CPU generator (mt19937) only uses the low 32 bits of its seed, so
    seeds that differ only above bit 31 would give identical streams; the
    whole seed is hashed down to the 32 bits that count instead.
    """
    gen = torch.Generator(device="cpu")
    gen.manual_seed(mix_seed(int(seed) % _SEED_SPACE) & 0xFFFFFFFF)
    return gen
