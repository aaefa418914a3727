"""``raised_saying`` and ``every_rank_raised``, the tests of the ranks' exceptions that known-bug predicates
share: the type (or a subclass) and every one of torch's quoted words must hold, in the message or the
traceback, of one rank's exception, or of each that some ranks raised."""

from __future__ import annotations

from fuzzdist.errors import PropertyFailure, RankError
from fuzzdist.known_bugs.predicates import every_rank_raised, raised_saying
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


def _ranks_raised(**exceptions: BaseException) -> RankError:
    """A RankError of the ranks ``r<n>=exception``, each with a traceback through ``load_state_dict``."""
    excs = {int(name[1:]): exc for name, exc in exceptions.items()}
    return RankError(sorted(excs), dict.fromkeys(excs, 'File "m.py", in load_state_dict'), {}, excs)


def test_every_rank_that_raised_must_raise_the_type_saying_every_word():
    refused = RuntimeError("Unexpected key(s) in state_dict")
    assert every_rank_raised(_ranks_raised(r0=refused, r2=refused), RuntimeError, "Unexpected key(s)", "load_state")
    other = ValueError("Unexpected key(s) in state_dict")
    assert not every_rank_raised(_ranks_raised(r0=refused, r1=other), RuntimeError, "Unexpected key(s)")
    assert not every_rank_raised(_ranks_raised(r0=refused), RuntimeError, "Unexpected key(s)", "_flat_param")


def test_a_failure_no_rank_raised_is_no_match():
    assert not every_rank_raised(PropertyFailure("ranks [0] lost values", []), RuntimeError)
    assert not every_rank_raised(_ranks_raised(), RuntimeError)
