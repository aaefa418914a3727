"""The hooks over a ``ReorderingProcessGroup`` that completes their futures in a drawn order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fuzzdist import strategies as fst
from fuzzdist.properties.ddp import pg_wrapper

if TYPE_CHECKING:
    from fuzzdist.pool.rank.context import RankContext


REORDER_KINDS = ("reorder-subclass", "reorder-future")


def _wrapped(ctx: RankContext, pg_kind: str, schedule: fst.CompletionOrder | None) -> Any:
    kwargs = pg_wrapper(pg_kind, schedule)
    if not kwargs:
        return ctx.group
    return kwargs["wrap"](ctx.group, *kwargs["wrap_args"], **kwargs["wrap_kwargs"])
