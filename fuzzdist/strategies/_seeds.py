"""Process-independent seeding: a seeded CPU ``torch.Generator``, never the
global RNG, and a stable way to derive sub-seeds (Python's ``hash`` is salted
per process, so it is never used)."""

from __future__ import annotations

import hashlib

import torch

_SEED_SPACE = 1 << 64


def _mix_seed(*parts: int) -> int:
    """A 64-bit seed derived from ``parts``, identical in every process."""
    text = ",".join(str(int(p)) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def _generator(seed: int) -> torch.Generator:
    """A fresh CPU generator seeded from ``seed`` (any int).

    torch's CPU generator (mt19937) only uses the low 32 bits of its seed, so
    seeds that differ only above bit 31 would give identical streams; the
    whole seed is hashed down to the 32 bits that count instead.
    """
    gen = torch.Generator(device="cpu")
    gen.manual_seed(_mix_seed(int(seed) % _SEED_SPACE) & 0xFFFFFFFF)
    return gen
