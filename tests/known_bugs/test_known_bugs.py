"""The known-bug registry: a recognised failure is a sighting, anything else stays a failure."""

from __future__ import annotations

import pytest

from fuzzdist import known_bugs
from fuzzdist.errors import InvalidArgument, PropertyFailure

BUG = known_bugs.register(
    known_bugs.KnownBug(
        id="test-only-odd-sizes",
        summary="a planted 'torch bug': odd sizes fail with 'odd'",
        where=("test-prop",),
        recognise=lambda ex, f: isinstance(f, PropertyFailure) and ex["size"] % 2 == 1 and "odd" in str(f),
        seen_on=("2.13",),
    )
)


def check(size: int, message: str = "odd size differs") -> None:
    if size % 2:
        raise PropertyFailure(message)


def test_a_recognised_failure_is_tallied_not_raised():
    with known_bugs.collecting() as tally:
        for size in (1, 2, 3):
            with known_bugs.known_failures("test-prop", size=size):
                check(size)
    (sighting,) = tally.sightings.values()
    assert (sighting.bug, sighting.count, sighting.example) == (BUG, 2, "size=1")
    assert tally.lines()[0].startswith("KNOWN test-only-odd-sizes x2 [wrong result]:")


def test_same_inputs_with_a_different_symptom_stay_a_failure():
    with known_bugs.collecting() as tally, pytest.raises(PropertyFailure, match="garbage"):
        with known_bugs.known_failures("test-prop", size=3):
            check(3, message="garbage")
    assert not tally


def test_another_check_is_not_explained_by_the_bug():
    with known_bugs.collecting(), pytest.raises(PropertyFailure):
        with known_bugs.known_failures("other-prop", size=3):
            check(3)


def test_without_a_tally_the_failure_is_raised_with_a_note():
    with known_bugs.not_collecting(), pytest.raises(PropertyFailure) as info:
        with known_bugs.known_failures("test-prop", size=3):
            check(3)
    assert any("known torch bug 'test-only-odd-sizes'" in n for n in info.value.__notes__)


def test_reproduces_tells_present_from_fixed():
    with known_bugs.collecting() as tally:  # a reproduced bug is tallied (pytest reports it KNOWN)
        assert known_bugs.reproduces(BUG.id, "test-prop", {"size": 3}, lambda: check(3))
    assert tally.total == 1
    assert not known_bugs.reproduces(BUG.id, "test-prop", {"size": 3}, lambda: None)
    with pytest.raises(PropertyFailure):
        known_bugs.reproduces(BUG.id, "test-prop", {"size": 3}, lambda: check(3, "garbage"))


def _other_predicate(example, failure) -> bool:
    return False


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(id="Bad Id"), "lower-case words"),
        (dict(where=()), "names no check"),
        (dict(summary="another bug under the same id"), "already registered"),
        (dict(where=("another-prop",)), "already registered"),
        (dict(recognise=_other_predicate), "already registered"),
    ],
)
def test_bad_entries_say_what_to_do(bad, match):
    fields = dict(id=BUG.id, summary=BUG.summary, where=BUG.where, recognise=BUG.recognise, seen_on=BUG.seen_on)
    with pytest.raises(InvalidArgument, match=match):
        known_bugs.register(known_bugs.KnownBug(**{**fields, **bad}))


ENTRY_MODULE = """
from fuzzdist import known_bugs

def odd(example, failure):
    return "odd" in str(failure)

BUG = known_bugs.register(known_bugs.KnownBug(id="test-only-reimported", summary="registered on import",
                                              where=("test-prop",), recognise=odd, seen_on=("2.13",)))
"""


def test_a_module_imported_again_registers_its_entry_again(tmp_path):
    """pytest.main twice in one process (pytester in-process) imports a property module anew: its entry,
    with new function objects, is the same entry, not a clash."""
    import importlib.util

    (tmp_path / "entry_module.py").write_text(ENTRY_MODULE, encoding="utf-8")
    bugs = []
    for _ in range(2):
        spec = importlib.util.spec_from_file_location("entry_module", tmp_path / "entry_module.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        bugs.append(module.BUG)
    assert bugs[0].recognise is not bugs[1].recognise  # two imports, two predicates
    assert known_bugs.registry()["test-only-reimported"] is bugs[1]  # the latest import's


def test_reproduces_runs_the_check_as_outside_a_tally():
    """The property's own known_failures() inside the pinned check must raise, not tally."""

    def property_check():
        with known_bugs.known_failures("test-prop", size=3):
            check(3)

    with known_bugs.collecting() as tally:
        assert known_bugs.reproduces(BUG.id, "test-prop", {"size": 3}, property_check)
    assert tally.total == 1


def test_fixed_message_says_what_to_do():
    message = known_bugs.fixed_message(BUG.id)
    assert message.startswith(f"known bug {BUG.id} no longer reproduces on torch ")
    assert "torch fixed it; narrow seen_on / drop the entry" in message


def test_sighted_tallies_only_inside_a_tally():
    with known_bugs.collecting() as tally:
        assert known_bugs.sighted("test-prop", {"size": 3}, PropertyFailure("odd"))
        assert not known_bugs.sighted("test-prop", {"size": 3}, PropertyFailure("garbage"))
    assert tally.total == 1
    with known_bugs.not_collecting():
        failure = PropertyFailure("odd")
        assert not known_bugs.sighted("test-prop", {"size": 3}, failure)
    assert any(BUG.id in note for note in failure.__notes__)


def test_a_known_bug_carries_its_kind_where_it_is_reported():
    bug = known_bugs.register(
        known_bugs.KnownBug(
            id="test-only-kind-shown",
            summary="a planted misuse",
            where=("test-kind",),
            recognise=lambda ex, f: isinstance(f, PropertyFailure),
            seen_on=("2.13",),
            kind="missing validation",
        )
    )
    with known_bugs.collecting() as tally:
        with known_bugs.known_failures("test-kind", size=1):
            check(1)
    assert tally.lines()[0] == "KNOWN test-only-kind-shown x1 [missing validation]: a planted misuse"
    assert tally.as_json()[0]["kind"] == "missing validation"
    assert bug.kind in known_bugs.KINDS


def test_an_unknown_kind_is_refused():
    with pytest.raises(InvalidArgument, match="kind='bug'"):
        known_bugs.register(
            known_bugs.KnownBug(
                id="test-only-bad-kind",
                summary="x",
                where=("test-prop",),
                recognise=lambda ex, f: False,
                seen_on=("2.13",),
                kind="bug",
            )
        )
    assert "test-only-bad-kind" not in known_bugs.registry()
