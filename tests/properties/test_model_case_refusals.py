"""The model cases of the checkpoint and reshard properties refuse an MLP or optimizer they can't build,
with the same words, before any rank runs."""

from __future__ import annotations

import pytest

from fuzzdist.errors import InvalidArgument
from fuzzdist.properties.checkpoint import ModelCase
from fuzzdist.properties.reshard.model_state import ModelReshardCase


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: ModelCase(**kw),
        lambda **kw: ModelReshardCase(save_ranks=2, load_ranks=1, **kw),
    ],
    ids=["ModelCase", "ModelReshardCase"],
)
def test_an_unknown_optimizer_or_too_few_widths_is_refused(make):
    with pytest.raises(InvalidArgument, match=r"^unknown optimizer 'lbfgs'; choose from \('sgd', 'adam'\)$"):
        make(optimizer="lbfgs")
    with pytest.raises(InvalidArgument, match=r"^widths needs >= 2 entries, all >= 1, got \(3,\)$"):
        make(widths=(3,))
    with pytest.raises(InvalidArgument, match=r"got \(2, 0\)$"):
        make(widths=(2, 0))
