"""``expected_local``, the piece of a full tensor a rank of a mesh holds: ``torch.chunk`` pieces per
``"S<d>"`` name, mesh dim 0 first; a Replicate or Partial name keeps the whole of its mesh dim's piece."""

from __future__ import annotations

import torch

from fuzzdist.properties.dtensor import expected_local


def test_shard_names_split_as_torch_chunk_mesh_dim_0_first():
    full = torch.arange(30).reshape(5, 6)
    piece = expected_local(full, (2, 3), (1, 2), ("S0", "S-1"))
    outer = torch.chunk(full, 2, dim=0)[1]
    assert torch.equal(piece, torch.chunk(outer, 3, dim=1)[2])


def test_an_empty_last_chunk_is_an_empty_piece():
    full = torch.arange(3)
    assert expected_local(full, (4,), (3,), ("S0",)).shape == (0,)


def test_replicate_and_partial_names_keep_the_whole_piece():
    full = torch.arange(12).reshape(3, 4)
    for name in ("R", "P+", "P>", "P<"):
        assert torch.equal(expected_local(full, (2, 2), (1, 1), (name, "S1")), full[:, 2:])
