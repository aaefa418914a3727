"""The short repr of a drawn setup: the fields always shown, then only those that differ from their defaults."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis.vendor.pretty import pretty

from fuzzdist.properties.fsdp1.config import FSDP1Config
from fuzzdist.strategies import DDPConfig, FSDPConfig
from fuzzdist.strategies._config_repr import non_default_repr


@dataclass(frozen=True)
class _Setup:
    widths: tuple[int, ...] = (1, 1)
    steps: int = 1
    optimizer: str = "sgd"
    per_layer: bool = False


def test_fields_always_shown_come_first_then_the_non_default_ones_in_declaration_order():
    setup = _Setup(per_layer=True, optimizer="adam")
    assert non_default_repr(setup, always=("widths",)) == "_Setup(widths=(1, 1), optimizer='adam', per_layer=True)"
    assert non_default_repr(_Setup(), always=()) == "_Setup()"


def test_the_setups_print_their_defaults_left_out():
    assert repr(DDPConfig((2, 3), (1, 2), steps=2)) == "DDPConfig(widths=(2, 3), batch_sizes=(1, 2), steps=2)"
    assert repr(FSDPConfig((1, 1), (1, 1), (2,), per_layer=True)) == (
        "FSDPConfig(widths=(1, 1), batch_sizes=(1, 1), mesh_shape=(2,), per_layer=True)"
    )


def test_hypothesis_prints_a_setup_as_its_short_repr():
    config = FSDP1Config((3, 1), (2, 2), no_sync=True)
    assert repr(config) == "FSDP1Config(widths=(3, 1), batch_sizes=(2, 2), no_sync=True)"
    assert pretty(config) == repr(config)
