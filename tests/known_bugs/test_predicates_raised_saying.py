"""``raised_saying``, the test of one rank's exception that known-bug predicates share: the type (or a
subclass) and every one of torch's quoted words must hold, in the message or the traceback."""

from __future__ import annotations

from fuzzdist.known_bugs.predicates import raised_saying
from fuzzdist.problems import Kind, Problem


def _raised(error: type[BaseException], text: str = "", trace: str = "") -> Problem:
    """A rank's RAISED record of an ``error`` with message ``text`` and traceback ``trace``."""
    names = tuple(f"{c.__module__}.{c.__qualname__}" for c in error.__mro__)
    return Problem(Kind.RAISED, error=error.__name__, error_types=names, error_text=text, trace=trace)


def test_the_type_and_every_word_must_hold():
    problem = _raised(RuntimeError, "Unexpected key(s) in state_dict", trace='File "x.py", in _flat_param')
    assert raised_saying(problem, RuntimeError, "Unexpected key(s) in state_dict", "_flat_param")
    assert raised_saying(problem, Exception, "Unexpected key(s)")  # a base class of the raised type


def test_a_missing_word_or_another_type_is_no_match():
    problem = _raised(RuntimeError, "Unexpected key(s) in state_dict")
    assert not raised_saying(problem, RuntimeError, "Unexpected key(s) in state_dict", "_flat_param")
    assert not raised_saying(problem, ValueError, "Unexpected key(s) in state_dict")


def test_a_problem_no_rank_raised_is_no_match():
    problem = Problem(Kind.MISMATCH, "param w", error_text="Unexpected key(s) in state_dict")
    assert not raised_saying(problem, RuntimeError, "Unexpected key(s) in state_dict")
