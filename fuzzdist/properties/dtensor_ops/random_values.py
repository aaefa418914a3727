"""Random operators at the parameters that leave nothing to chance: ``native_dropout`` with ``p = 0`` in
training (every element kept, each scaled by 1), ``bernoulli_`` with probability 0 or 1, ``uniform_`` over
an interval of one point and ``normal_`` with standard deviation 0.  Their values are then what torch's
docs define for every random stream, so DTensor's sharding of the random operator is checked bitwise
without assuming that its random numbers match the local generator's (which torch documents only for
its own RNG tracker on accelerators).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, op_maker, register
from fuzzdist.properties.dtensor_ops.inputs import FLOATS, operand, shapes

_op = op_maker("random_values")


@st.composite
def _one(d: st.DrawFn) -> Arguments:
    return (d(operand(d(shapes(), label="shape"), FLOATS)),), {}


@st.composite
def _value(d: st.DrawFn) -> Arguments:
    x = d(operand(d(shapes(), label="shape"), FLOATS))
    return (x, d(st.sampled_from([0.0, 1.0, -2.5]), label="value")), {}


@st.composite
def _probability(d: st.DrawFn) -> Arguments:
    x = d(operand(d(shapes(), label="shape"), FLOATS))
    return (x, d(st.sampled_from([0.0, 1.0]), label="p")), {}


register(
    _op("native_dropout_p0", lambda x: torch.native_dropout(x, 0.0, True), lambda: _one(), grad=True),
    _op("bernoulli_", lambda x, p: x.bernoulli_(p), lambda: _probability(), mutates=0),
    _op("uniform_", lambda x, v: x.uniform_(v, v), lambda: _value(), mutates=0),
    _op("normal_", lambda x, v: x.normal_(v, 0.0), lambda: _value(), mutates=0),
)
