"""Every use of Hypothesis internals in fuzzdist, one small function each.

Hypothesis does not promise these names (private attributes of ``@given``
tests, ``hypothesis.internal``, undocumented helpers), so they live here
alone: a Hypothesis upgrade that moves one breaks this module, not the
campaign runner, replay or conformance engine.

Checked against Hypothesis 6.170.15 (the version fuzzdist's tests run
with).  pyproject.toml asks for ``hypothesis>=6.124``: the choice-sequence
helpers (``choices_to_bytes``, ``choices_from_bytes``,
``ConjectureData.for_choices``) belong to the database format Hypothesis
introduced in that release.  Releases between 6.124 and 6.170 were not run.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from hypothesis import settings as Settings

_SETTINGS = "_hypothesis_internal_use_settings"
_SEED = "_hypothesis_internal_use_seed"
_DATABASE_KEY = "_hypothesis_internal_database_key"
_REPRODUCE = "_hypothesis_internal_use_reproduce_failure"
_ADD_DIGEST = "_hypothesis_internal_add_digest"
_MISSING = object()


def current_profile_name() -> str | None:
    """The name of the settings profile loaded last (``settings.load_profile``), None before any."""
    return Settings._current_profile


# -- database keys -------------------------------------------------------------------------


def function_digest(fn: Callable[..., Any]) -> bytes:
    """Hypothesis's digest of a test function: its database key (source, signature, extra digest)."""
    from hypothesis.internal.reflection import function_digest as digest

    return digest(fn)


def set_extra_digest(fn: Callable[..., Any], extra: bytes) -> None:
    """Mix ``extra`` into ``fn``'s digest, as pytest's hypothesis plugin does for parametrized tests."""
    setattr(fn, _ADD_DIGEST, extra)


def digest_with(fn: Callable[..., Any], extra: bytes | None) -> bytes:
    """``fn``'s digest as if ``extra`` were its extra digest (None: as if it had none); ``fn`` is left
    as it was."""
    saved = fn.__dict__.get(_ADD_DIGEST, _MISSING)
    if extra is None:
        fn.__dict__.pop(_ADD_DIGEST, None)
    else:
        setattr(fn, _ADD_DIGEST, extra)
    try:
        return function_digest(fn)
    finally:
        if saved is _MISSING:
            fn.__dict__.pop(_ADD_DIGEST, None)
        else:
            setattr(fn, _ADD_DIGEST, saved)


# -- running a @given test differently ---------------------------------------------------


def given_settings(test: Callable[..., Any]) -> Settings:
    """The settings a ``@given`` test runs with (its ``@settings``, else the profile's)."""
    return getattr(test, _SETTINGS)


def given_argument_names(test: Callable[..., Any]) -> list[str]:
    """The names of the arguments ``@given`` draws for ``test``, in the order given."""
    return list(getattr(test.hypothesis, "_given_kwargs", {}) or {})  # type: ignore[attr-defined]


class TestOverrides:
    """Overrides of a ``@given`` test's settings, seed and database key for the calls that follow.

    ``restore()`` puts back exactly what the test had before.
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, test: Callable[..., Any]) -> None:
        self._test = test
        self._saved = {attr: test.__dict__.get(attr, _MISSING) for attr in (_SETTINGS, _SEED, _DATABASE_KEY)}

    def set_settings(self, settings: Settings) -> None:
        setattr(self._test, _SETTINGS, settings)

    def set_seed(self, seed: int | None) -> None:
        """What ``@seed(seed)`` would set: the random generation of the next calls."""
        setattr(self._test, _SEED, seed)

    def set_database_key(self, key: bytes) -> None:
        """Save and replay examples under ``key`` instead of the digest Hypothesis would compute."""
        setattr(self._test, _DATABASE_KEY, key)

    def restore(self) -> None:
        for attr, value in self._saved.items():
            if value is _MISSING:
                self._test.__dict__.pop(attr, None)
            else:
                setattr(self._test, attr, value)


# -- reproducing one stored example -----------------------------------------------------


def reproduce_failure_blob(entry: bytes) -> bytes | None:
    """The ``@reproduce_failure`` blob of a database entry; None if the bytes aren't a choice sequence."""
    from hypothesis.core import encode_failure
    from hypothesis.database import choices_from_bytes

    choices = choices_from_bytes(entry)
    return None if choices is None else encode_failure(choices)


def entry_from_blob(blob: bytes | str) -> bytes | None:
    """The database entry (choice sequence bytes) of a ``@reproduce_failure`` blob; None if ``blob``
    is not one (not base64, not a choice sequence)."""
    from hypothesis.core import decode_failure
    from hypothesis.database import choices_to_bytes
    from hypothesis.errors import InvalidArgument

    try:
        return choices_to_bytes(decode_failure(blob.encode("ascii") if isinstance(blob, str) else blob))
    except (InvalidArgument, UnicodeEncodeError, ValueError):
        return None


def blob_from_decorator(text: str | None) -> str | None:
    """The blob (base64 text) of a ``@reproduce_failure('VERSION', b'BLOB')`` decorator; None if none."""
    match = re.search(r"@reproduce_failure\([^,]*,\s*b['\"]([A-Za-z0-9+/=]+)['\"]\)", text or "")
    return match.group(1) if match else None


def secondary_key(key: bytes) -> bytes:
    """Where Hypothesis moves a test's failing examples once it found a smaller one (its engine's
    ``secondary_key``): still kept, replayed after the primary ones."""
    return b".".join((key, b"secondary"))


@contextlib.contextmanager
def reproducing(test: Callable[..., Any], blob: bytes) -> Iterator[str]:
    """Calls of ``test`` inside run only the example ``blob``, as under ``@reproduce_failure``.

    Yields the ``@reproduce_failure(...)`` decorator text for that example.
    """
    import hypothesis

    saved = getattr(test, _REPRODUCE)
    setattr(test, _REPRODUCE, (hypothesis.__version__, blob))
    try:
        yield f"@reproduce_failure({hypothesis.__version__!r}, {blob!r})"
    finally:
        setattr(test, _REPRODUCE, saved)


@contextlib.contextmanager
def reports_to(report: Callable[[str], None]) -> Iterator[None]:
    """Send what Hypothesis reports (falsifying examples, notes) to ``report`` instead of printing it."""
    from hypothesis.reporting import with_reporter

    with with_reporter(lambda text: report(str(text))):
        yield


# -- the example running now ----------------------------------------------------------------


def _current_data() -> Any:
    try:
        from hypothesis.control import current_build_context

        return current_build_context().data
    except Exception:  # noqa: BLE001 - outside a Hypothesis example, or a Hypothesis without build contexts
        return None


def current_example_observations() -> tuple[dict[str, Any], dict[str, float]] | None:
    """The ``event()`` labels (label -> value) and ``target()`` scores of the running example;
    None outside one."""
    data = _current_data()
    if data is None:
        return None
    return data.events, data.target_observations


def current_example_bytes() -> bytes | None:
    """The running example's choice sequence as database bytes; None outside an example."""
    try:
        from hypothesis.database import choices_to_bytes

        return choices_to_bytes(_current_data().choices)
    except Exception:  # noqa: BLE001 - a Hypothesis without these internals: no key
        return None


def interesting_origin(exc: BaseException) -> str:
    """Hypothesis's InterestingOrigin of a failure (exception type and raising site, with its chain):
    what Hypothesis tells distinct failures apart by."""
    from hypothesis.internal.escalation import InterestingOrigin

    return str(InterestingOrigin.from_exception(exc))


@contextlib.contextmanager
def example_context(test: Callable[..., Any], events: dict[str, str]) -> Iterator[None]:
    """A Hypothesis build context holding an empty example with ``events``, for code that
    runs inside an example (the campaign's per-example wrapper) measured outside one."""
    from hypothesis.control import BuildContext
    from hypothesis.internal.conjecture.data import ConjectureData

    data = ConjectureData.for_choices([])
    data.events.update(events)
    with BuildContext(data, wrapped_test=test):
        yield


# -- what Hypothesis prints ------------------------------------------------------------------
#
# The failing example's notes (``exc.__notes__``), or the lines Hypothesis reports: its layout is not
# an API.  "Falsifying example: f(...)" until 6.x, "Failing test case: ..." in newer releases; what
# the example reported as it ran follows (st.data()'s draws as "Draw 1: ...", the test's note()s), then
# what Hypothesis adds about the search (the explain phase, target scores, the @reproduce_failure blob).

_EXAMPLE_PREFIXES = ("Failing test case: ", "Falsifying example: ", "Falsifying explicit example: ")
_ATTEMPT_PREFIX = "Trying example: "  # an example reported as it runs (verbose, or a replayed one)
# Where what the example reported ends: what Hypothesis adds after it.
_AFTER_EXAMPLE = (
    "\nYou can reproduce",
    "You can reproduce",
    "Explanation:",
    "Highest target score",
    "(note: ",
    "Failed to reproduce exception",
    "Unreliable ",
    "Trying example: ",
)


def printed_call(lines: Iterable[str], *, attempts: bool = False) -> str:
    """The call alone of :func:`printed_example` (``f(a=1, data=data(...))``; "" if none)."""
    prefixes = _EXAMPLE_PREFIXES + ((_ATTEMPT_PREFIX,) if attempts else ())
    return next((line[len(p) :] for line in lines for p in prefixes if line.startswith(p)), "")


def printed_example(lines: Iterable[str], *, attempts: bool = False) -> str:
    """The example Hypothesis printed, from an exception's notes or the lines it reported: the call
    after "Falsifying example: " (or its other prefixes), then what it reported as it ran (st.data()'s
    "Draw N: ..." lines, the test's ``note()``s; never its ``event()``s, which Hypothesis doesn't print)
    ("" if none).  With ``attempts``, an example reported as "Trying example: " counts too."""
    prefixes = _EXAMPLE_PREFIXES + ((_ATTEMPT_PREFIX,) if attempts else ())
    out: list[str] = []
    reporting = False  # between the example's call and what Hypothesis adds after it
    for line in lines:
        for prefix in prefixes:
            if line.startswith(prefix):
                out.append(line[len(prefix) :])
                reporting = True
                break
        else:
            if reporting and line.startswith(_AFTER_EXAMPLE):
                reporting = False
            elif reporting or line.startswith("Draw "):
                out.append(line)
    return "\n".join(out)


# -- st.data()'s draws, before Hypothesis prints them ------------------------------------------
#
# Hypothesis prints a st.data() object's draws only for the example it reports in the end; an example
# shown before that (a failure whose shrinking the time budget cut short) would show "data=data(...)".
# While fuzzdist runs an example, its st.data() objects note what they draw.

_DRAWN = "_fuzzdist_drawn"


def record_draws(kwargs: Mapping[str, Any]) -> None:
    """Make each ``st.data()`` object among an example's arguments note what it draws (for
    :func:`drawn_lines`); cheap: one list append per draw, formatted only if the example is shown."""
    from hypothesis.strategies import DataObject

    for value in kwargs.values():
        if type(value) is DataObject and _DRAWN not in value.__dict__:
            drawn: list[tuple[Any, Any]] = []
            value.__dict__[_DRAWN] = drawn
            value.draw = _noting(value.draw, drawn)  # type: ignore[method-assign]


def _noting(draw: Callable[..., Any], drawn: list[tuple[Any, Any]]) -> Callable[..., Any]:
    @functools.wraps(draw)
    def noting_draw(strategy: Any, label: Any = None) -> Any:
        result = draw(strategy, label)
        drawn.append((label, result))
        return result

    return noting_draw


def drawn_lines(kwargs: Mapping[str, Any]) -> list[str]:
    """The draws of the ``st.data()`` objects among ``kwargs``, as Hypothesis prints them
    ("Draw 1 (label): value"), each value cut to 4,000 characters."""
    from hypothesis.strategies import DataObject
    from hypothesis.vendor.pretty import pretty

    lines = []
    # Several st.data() arguments of one example are one object: its draws are shown once.
    data_objects = {id(v): v for v in kwargs.values() if type(v) is DataObject}
    for value in data_objects.values():
        for i, (label, result) in enumerate(value.__dict__.get(_DRAWN, ()), 1):
            try:
                shown = pretty(result)
            except Exception as exc:  # noqa: BLE001 - a broken __repr__ must not lose the failure
                shown = f"<unprintable {type(result).__name__}: {type(exc).__name__}>"
            lines.append(f"Draw {i}{'' if label is None else f' ({label})'}: {shown[:4000]}")
    return lines


def reproduce_failure_from_notes(notes: Iterable[str]) -> str | None:
    """The ``@reproduce_failure(...)`` decorator Hypothesis printed in ``notes`` (with ``print_blob``)."""
    for note in notes:
        match = re.search(r"@reproduce_failure\([^)]*\)", note)
        if match:
            return match.group(0)
    return None


# -- observability ------------------------------------------------------------------------
#
# Hypothesis writes one observation per test case when observability is on (a callback is
# registered: HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY, Tyche, HypoFuzz).  Its ``features`` come from
# ``event()`` (public); its ``timing`` has no public way in.  fuzzdist adds each rank's wall time
# there through ``hypothesis.core.make_testcase``, which builds every test case's observation.  Only
# while fuzzdist needs it: the first time an example records rank times, ``make_testcase`` is
# replaced by a wrapper that adds the times recorded for the test case's ConjectureData and leaves
# other test cases alone, and the wrapper puts the original back as soon as no example has times
# waiting (normally as that example's observation is built).  Where the names are missing (releases
# before 2025-08 have no ``observability_enabled``: their TESTCASE_CALLBACKS is not looked at),
# nothing is added.

try:
    from hypothesis.internal.observability import observability_enabled as _observability_enabled
except ImportError:  # a Hypothesis without observability callbacks

    def _observability_enabled() -> bool:
        return False


_WRAPPED = "_fuzzdist_adds_timing"
_example_timing: weakref.WeakKeyDictionary[Any, dict[str, float]] = weakref.WeakKeyDictionary()
_patching = threading.Lock()  # installing and removing the wrapper (examples may run in threads)


def observability_enabled() -> bool:
    """Whether Hypothesis records observations now (cheap: what fuzzdist checks once per example)."""
    return _observability_enabled()


def add_example_timing(timing: Mapping[str, float]) -> bool:
    """Add ``timing`` (name -> seconds, summed per name over the calls of one example) to the
    ``timing`` of the running example's observation.  False where it can't be (outside an example,
    or a Hypothesis without the names this needs)."""
    data = _current_data()
    if data is None:
        return False
    with _patching:
        if not _wrap_make_testcase():
            return False
        try:
            kept = _example_timing.setdefault(data, {})
        except TypeError:  # a ConjectureData that can't be weakly referenced
            _unwrap_if_idle()
            return False
        for name, seconds in timing.items():
            kept[name] = kept.get(name, 0.0) + seconds
    return True


def _wrap_make_testcase() -> bool:
    """Put the timing wrapper in place of ``make_testcase`` (if it is not there); False if Hypothesis has
    no ``make_testcase``.  Called with ``_patching`` held."""
    try:
        import hypothesis.core as core

        original = core.make_testcase
    except (ImportError, AttributeError):
        return False
    if getattr(original, _WRAPPED, False):
        return True

    @functools.wraps(original)
    def make_testcase(*args: Any, **kwargs: Any) -> Any:
        with _patching:
            extra = _pop_example_timing(kwargs.get("data"))
            _unwrap_if_idle()
        if extra:
            kwargs["timing"] = {**(kwargs.get("timing") or {}), **extra}
        return original(*args, **kwargs)

    setattr(make_testcase, _WRAPPED, True)
    core.make_testcase = make_testcase
    return True


def _unwrap_if_idle() -> None:
    """Put Hypothesis's own ``make_testcase`` back once no example has times waiting for its
    observation.  Called with ``_patching`` held."""
    if len(_example_timing):
        return
    import hypothesis.core as core

    current = getattr(core, "make_testcase", None)
    if getattr(current, _WRAPPED, False):
        core.make_testcase = current.__wrapped__  # type: ignore[union-attr]


def _pop_example_timing(data: Any) -> dict[str, float] | None:
    try:
        return _example_timing.pop(data, None)
    except TypeError:  # None, or a ConjectureData that can't be weakly referenced
        return None
