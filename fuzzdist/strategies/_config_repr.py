"""The short repr the drawn setup dataclasses share: what a shrunk failure prints of them."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar


def non_default_repr(config: Any, always: tuple[str, ...]) -> str:
    """``Name(field=value, ...)`` for the dataclass instance ``config``: the fields named in ``always``,
    then every other field, in declaration order, whose value differs from its default."""
    parts = [f"{name}={getattr(config, name)!r}" for name in always]
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.name not in always and value != field.default:
            parts.append(f"{field.name}={value!r}")
    return f"{type(config).__name__}({', '.join(parts)})"


class NonDefaultRepr:
    """Base of a setup dataclass (declared with ``repr=False``) whose repr is :func:`non_default_repr`, showing
    the fields of ``always_shown`` always: Hypothesis prints a dataclass field by field, and a failure's setup
    reads better with the defaults left out."""

    always_shown: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        return non_default_repr(self, self.always_shown)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # the short repr, also where Hypothesis pretty-prints
