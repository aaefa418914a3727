"""fuzzdist's pytest plugin (entry point ``pytest11``).

Gives tests a ``rank_pool`` fixture: a :class:`~fuzzdist.RankPool` shared by
every test of the session that asks for the same world size, backend,
device and timeout.  A test picks its pool with the ``fuzzdist`` marker::

    @pytest.mark.fuzzdist(world_size=2, device=["cpu", "cuda"])
    @given(...)
    def test_something(rank_pool, ...):
        rank_pool.run(check, ...)

A list of devices or world sizes parametrizes the test; the
``--fuzzdist-world-size`` option replaces every property's world sizes
(``4``, ``2,4``) or adds to them (``+4``).  What the machine can't run (no
GPU, too few GPUs) is skipped with the reason, before any rank process
starts.

Each test runs inside :func:`fuzzdist.known_bugs.collecting`: a test whose only
failures were sightings of known torch bugs is reported KNOWN (``K``, "2 known"
in the summary line), with the sightings listed at the end of the run; a test
that also failed otherwise fails, and shows its sightings with its failure.

The session's pools come from the ``pytest_fuzzdist_make_pool_cache`` hook
(:mod:`fuzzdist.driver.newhooks`; default: a :class:`PoolCache`) and are kept in
``config.stash[pool_cache_key]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from fuzzdist import known_bugs
from fuzzdist.compat import hypothesis_internals as _hypothesis_compat
from fuzzdist.driver import newhooks, profiles, under_hypofuzz, variant_keys
from fuzzdist.driver.newhooks import RankPools
from fuzzdist.driver.variant_keys import parametrized_by_pool
from fuzzdist.errors import CapabilityError, PoolGone, PoolLost, PoolStartupError, PropertyFailure
from fuzzdist.pool import DEFAULT_TIMEOUT, RankPool, observability
from fuzzdist.pool.capabilities.gpu import missing_gpus
from fuzzdist.pool.capabilities.probes import missing
from fuzzdist.pool.controller import timeout_problem
from fuzzdist.pool.rank import rank_output


@dataclass(frozen=True)
class PoolKey:
    world_size: int
    backend: str
    device: str
    timeout: float

    def __str__(self) -> str:
        return f"{self.device}-w{self.world_size}" + ("" if self.backend == "gloo" else f"-{self.backend}")


DEFAULT_WORLD_SIZE = 2  # for a property whose marker names no world size


@dataclass(frozen=True)
class WorldSizes:
    """What ``--fuzzdist-world-size`` asks for: ``sizes`` in place of every property's own world
    sizes, or (``add``) added to each property's own."""

    sizes: tuple[int, ...]
    add: bool = False

    def apply(self, own: list[int]) -> list[int]:
        """A property's world sizes, given its own (its marker's, else the default)."""
        return list(dict.fromkeys([*own, *self.sizes])) if self.add else list(self.sizes)

    def __str__(self) -> str:
        return ("+" if self.add else "") + ",".join(map(str, self.sizes))


def parse_world_sizes(text: str) -> WorldSizes:
    """``--fuzzdist-world-size``'s value: ``N[,N...]`` (these sizes for every property, in place of its
    marker's) or ``+N[,N...]`` (added to each property's own)."""
    if not re.fullmatch(r"\+?\d+(,\d+)*", text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not N[,N...] or +N[,N...]: give whole numbers of ranks, e.g. 4 (every property at "
            "4 ranks) or +4,8 (each property's own world sizes, and 4 and 8)"
        )
    sizes = tuple(int(part) for part in text.removeprefix("+").split(","))
    if min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a world size must be at least 1")
    return WorldSizes(sizes, add=text.startswith("+"))


pool_cache_key = pytest.StashKey[RankPools]()  # config.stash[pool_cache_key]: the session's pool cache
# config.stash[rank_output_key]: what the ranks wrote in passing examples, per test
rank_output_key = pytest.StashKey[rank_output.OutputLog]()
_notes_key = pytest.StashKey[list[str]]()  # what the session adopted from shared database keys
_tally_key = pytest.StashKey[known_bugs.Tally]()  # item.stash: the known-bug sightings of its call
_known_key = pytest.StashKey[list[tuple[str, str, list[str]]]]()  # (nodeid, outcome, Tally.lines()) per test
KNOWN_SECTION = "fuzzdist: known torch bugs"


class PoolCache:
    """One RankPool per PoolKey, started on first use and closed at the end of the session.

    ``rank_output``: what the pools do with what their ranks write ("capture" or "live", see RankPool).
    """

    def __init__(self, rank_output: str = "capture") -> None:
        self._pools: dict[PoolKey, RankPool] = {}
        self.rank_output = rank_output

    def get(self, key: PoolKey) -> RankPool:
        pool = self._pools.get(key)
        if pool is not None and pool.spent:  # its ranks could not be restarted: a fresh pool tries again
            pool.close()
            pool = None
        if pool is None:
            pool = RankPool(key.world_size, key.backend, key.device, key.timeout, rank_output=self.rank_output)
            self._pools[key] = pool
        return pool.start()

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(newhooks)


@pytest.hookimpl(trylast=True)
def pytest_fuzzdist_make_pool_cache(config: pytest.Config) -> RankPools:
    """fuzzdist's own pool cache, used when no other implementation returns one: local RankPools."""
    return PoolCache(rank_output=config.getoption("fuzzdist_rank_output", "capture"))


def parse_timeout(text: str) -> float:
    """``--fuzzdist-timeout``'s value: seconds, as ``fuzzdist run --timeout`` takes them (finite, from
    1 second to a week)."""
    value, problem = timeout_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fuzzdist", "fuzzdist: property testing of torch.distributed")
    group.addoption(
        "--fuzzdist-world-size",
        type=parse_world_sizes,
        default=None,
        metavar="[+]N[,N...]",
        help=f"world sizes: N[,N...] runs every property at these sizes, in place of its marker's; "
        f"+N[,N...] adds them to each property's own (default: the marker's, else "
        f"{DEFAULT_WORLD_SIZE})",
    )
    group.addoption(
        "--fuzzdist-timeout",
        type=parse_timeout,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"per-example timeout on the ranks; a hang past it is a RankTimeout (default {DEFAULT_TIMEOUT:g})",
    )
    group.addoption(
        "--fuzzdist-rank-output",
        choices=rank_output.OUTPUT_MODES,
        default="capture",
        help="what the ranks write (warnings, stderr, prints): 'capture' (default) keeps it per "
        "example, shows it with failures and summarises the rest at the end; 'live' lets "
        "the ranks print as they go",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs at least one CUDA GPU")
    config.addinivalue_line("markers", "multi_gpu(n=2, why=...): needs at least n CUDA GPUs (why: said in the skip)")
    config.addinivalue_line(
        "markers",
        "needs(*capabilities): skip unless the machine has them: cuda, pidfd_getfd, cupy, "
        "block_current_stream, expandable_segments (fuzzdist.pool.capabilities.PROBES)",
    )
    config.addinivalue_line(
        "markers",
        "fuzzdist(world_size=None, backend='gloo', device='cpu', timeout=None): the rank pool(s) "
        "the test's rank_pool fixture gets; a list of world sizes or devices parametrizes the test "
        "(--fuzzdist-world-size replaces or adds to the world sizes)",
    )
    profiles.register()
    if not config.getoption("hypothesis_profile", None):
        # No profile chosen: the deadline must be off (the pool's timeout is the deadline).
        from hypothesis import settings

        settings.load_profile("ci" if os.environ.get("CI") else "dev")
    config.stash[pool_cache_key] = config.hook.pytest_fuzzdist_make_pool_cache(config=config)
    config.stash[rank_output_key] = rank_output.OutputLog()


def pytest_unconfigure(config: pytest.Config) -> None:
    pools = config.stash.get(pool_cache_key, None)
    if pools is not None:
        pools.close()


def pytest_report_header(config: pytest.Config) -> str:
    import torch

    cuda = torch.cuda.device_count() if torch.backends.cuda.is_built() else 0
    requested = config.getoption("fuzzdist_world_size")
    own = f"per marker (else {DEFAULT_WORLD_SIZE})"
    world_sizes = own if requested is None else f"{own} {requested}" if requested.add else str(requested)
    return (
        f"fuzzdist: torch {torch.__version__}, {cuda} CUDA device(s), "
        f"hypothesis profile {_hypothesis_compat.current_profile_name()!r}, "
        f"world size {world_sizes}, "
        f"timeout {config.getoption('fuzzdist_timeout'):g}s"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "rank_pool" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("fuzzdist")
    options = dict(marker.kwargs) if marker else {}
    config = metafunc.config
    unknown = set(options) - {"world_size", "backend", "device", "timeout"}
    if unknown:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: unknown fuzzdist marker arguments "
            f"{sorted(unknown)}; use world_size, backend, device, timeout"
        )
    world_sizes = _marker_world_sizes(metafunc.definition.nodeid, options.get("world_size"))
    requested: WorldSizes | None = config.getoption("fuzzdist_world_size")
    if requested is not None:
        world_sizes = requested.apply(world_sizes)
    devices = _as_list(options.get("device", "cpu"))
    backend = options.get("backend", "gloo")
    timeout = float(options.get("timeout") or config.getoption("fuzzdist_timeout"))
    params = []
    for device in devices:
        for world_size in world_sizes:
            key = PoolKey(world_size, backend, device, timeout)
            marks = [pytest.mark.gpu] if device == "cuda" else []
            params.append(pytest.param(key, id=str(key), marks=marks))
    metafunc.parametrize("rank_pool", params, indirect=True, scope="session")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Give each rank-pool variant of a property its own database key, and file what the ranks
    write during the test under its node id.

    Hypothesis's pytest plugin does the first (the node id mixed into the key) only for tests with a
    ``parametrize`` marker; the pool variants come from ``pytest_generate_tests`` and would share
    one key, so running ``[cpu-w2]`` would replay, and delete as no longer failing, what
    ``[cpu-w3]`` found.
    """
    handle: Any = getattr(getattr(item, "obj", None), "hypothesis", None)
    inner = getattr(handle, "inner_test", None)
    if inner is not None and parametrized_by_pool(item):
        _hypothesis_compat.set_extra_digest(inner, item.nodeid.encode())
    log = item.config.stash.get(rank_output_key, None)
    _revive_spent_pools(item)
    try:
        if inner is not None:
            handle.inner_test = _tagging_property_failures(inner)
        outcome: Any
        with known_bugs.collecting() as tally:
            item.stash[_tally_key] = tally
            if log is None:
                outcome = yield
            else:
                with log.collecting(item.nodeid):
                    outcome = yield
        lost = outcome.excinfo[1] if outcome.excinfo else None
        if isinstance(lost, PoolLost):  # out of Hypothesis: the test fails with the pool's own error
            outcome.force_exception(lost.gone)
    finally:
        if inner is not None:
            handle.inner_test = inner


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under HypoFuzz, which runs examples without ``pytest_runtest_call``: tally known bugs per example
    (see :mod:`fuzzdist.driver.under_hypofuzz`)."""
    if under_hypofuzz.running():
        under_hypofuzz.prepare(items, _tagging_property_failures)


def _revive_spent_pools(item: pytest.Item) -> None:
    """A session pool whose ranks could not be restarted in an earlier test gets one more try before this
    one; if that fails too, its first ``run`` raises PoolGone, which names the cause."""
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, RankPool) and value.spent:
            with contextlib.suppress(PoolStartupError):
                value.revive()


def _tagging_property_failures(inner: Callable[..., Any]) -> Callable[..., Any]:
    """``inner`` that tags the running example's observation with a PropertyFailure it raises, and
    skips the test where it raises CapabilityError (what the pool's ranks support, probed in the test:
    :func:`fuzzdist.pool.capabilities.probed_once`).

    A pool tags its own failures inside ``pool.run``; a property's check fails afterwards, in the
    driver.  ``functools.wraps`` keeps Hypothesis's database key: ``function_digest`` reads the
    wrapped function's source and signature, and the copied ``__dict__`` carries its extra digest."""

    @functools.wraps(inner)
    def tagged(*args: Any, **kwargs: Any) -> Any:
        try:
            return inner(*args, **kwargs)
        except PropertyFailure as failure:
            observability.failed(failure)
            raise
        except CapabilityError as exc:
            pytest.skip(str(exc))
        except PoolGone as gone:  # not the property's failure: Hypothesis must neither save nor shrink it
            raise PoolLost(gone) from gone

    return tagged


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A call whose only failures were known torch bugs' sightings passed, and is marked KNOWN; any
    call with sightings lists them in a report section (shown with a failure)."""
    outcome: Any = yield
    tally = item.stash.get(_tally_key, None)
    if call.when != "call" or not tally:
        return
    report = outcome.get_result()
    lines = tally.lines()
    report.sections.append((KNOWN_SECTION, "\n".join(lines)))
    if report.passed:
        report.fuzzdist_known = tally.total  # read by pytest_report_teststatus
    item.config.stash.setdefault(_known_key, []).append((item.nodeid, report.outcome, lines))


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, Any] | None:
    """KNOWN: the test passed apart from sightings of known torch bugs (neither passed nor failed)."""
    if report.when == "call" and report.passed and getattr(report, "fuzzdist_known", None):
        return "known", "K", ("KNOWN", {"yellow": True})
    return None


def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> None:
    """Before plain pytest runs a pool variant whose own key holds nothing, adopt the examples stored
    under the key its variants shared (:mod:`fuzzdist.driver.variant_keys`); ``fuzzdist run`` and ``fuzzdist
    replay`` call the test themselves (their ``pytest_pyfunc_call`` runs first) and do the same with
    their own database."""
    inner = getattr(getattr(pyfuncitem.obj, "hypothesis", None), "inner_test", None)
    if inner is None or not parametrized_by_pool(pyfuncitem):
        return
    database = _hypothesis_compat.given_settings(pyfuncitem.obj).database
    note = variant_keys.adopt(pyfuncitem, database, _hypothesis_compat.function_digest(inner))
    if note is not None:
        pyfuncitem.config.stash.setdefault(_notes_key, []).append(note)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What the session adopted from shared database keys, and what the ranks wrote in passing examples
    (once per property: failures show their own)."""
    config = terminalreporter.config
    known = config.stash.get(_known_key, [])
    if known:
        terminalreporter.write_sep("=", KNOWN_SECTION)
        for nodeid, outcome, lines in known:
            terminalreporter.write_line(f"{nodeid}: {'KNOWN' if outcome == 'passed' else outcome.upper()}")
            for line in lines:
                terminalreporter.write_line(f"  {line}")
        terminalreporter.write_line("(a known torch bug is a finding: see fuzzdist.known_bugs and docs/findings.md)")
    notes = config.stash.get(_notes_key, [])
    if notes:
        terminalreporter.section("fuzzdist: examples from the shared database key", sep="-")
        for note in notes:
            terminalreporter.write_line(note)
    log = config.stash.get(rank_output_key, None)
    if log is not None and log.tests:
        terminalreporter.write_sep("=", "fuzzdist: what the ranks wrote in passing examples")
        for line in log.summary():
            terminalreporter.write_line(line)
        terminalreporter.write_line(
            "(a failure shows its ranks' output in full; --fuzzdist-rank-output=live prints it as it comes)"
        )


_backstop_scaled = pytest.StashKey[bool]()  # item.stash: pytest-timeout's settings already scaled


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's backstop for a ``@given`` test, scaled to the examples it runs
    (:func:`fuzzdist.driver.profiles.timeout_backstop`): the ``campaign`` profile is not cut off after the
    configured timeout.  A ``timeout`` marker on the test is its own choice and is kept as it is."""
    test = getattr(item, "obj", None)
    if (
        test is None
        or getattr(test, "hypothesis", None) is None
        or item.stash.get(_backstop_scaled, False)
        or item.get_closest_marker("timeout") is not None
    ):
        return None  # pytest-timeout (or another implementation) sets the timer as configured
    timeout = profiles.timeout_backstop(settings.timeout, _hypothesis_compat.given_settings(test).max_examples)
    if timeout == settings.timeout:
        return None
    item.stash[_backstop_scaled] = True
    try:  # the hook again, with the scaled timeout: whichever implementation sets timers sets this one
        return item.config.hook.pytest_timeout_set_timer(item=item, settings=settings._replace(timeout=timeout))
    finally:
        del item.stash[_backstop_scaled]


def _multi_gpu_skip_reason(n: int, why: str | None) -> str | None:
    """Why a ``multi_gpu(n, why=...)`` test can't run here (None: it can).

    ``why`` says what too few GPUs means for the test (NCCL's one GPU per rank); it is added where
    there are GPUs, but too few: without CUDA, the missing CUDA is the whole story.
    """
    import torch  # a GPU probe already imported it

    reason = missing_gpus(n)
    if reason is None:
        return None
    if why and torch.backends.cuda.is_built() and torch.cuda.device_count() > 0:
        reason = f"{reason}: {why}"
    return f"multi_gpu property {reason}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None:
        reason = missing_gpus(1)
        if reason:
            pytest.skip(f"gpu property {reason}")
    marker = item.get_closest_marker("multi_gpu")
    if marker is not None:
        reason = _multi_gpu_skip_reason(
            marker.kwargs.get("n", marker.args[0] if marker.args else 2), marker.kwargs.get("why")
        )
        if reason:
            pytest.skip(reason)
    for marker in item.iter_markers("needs"):
        reason = missing(*marker.args)
        if reason:
            pytest.skip(reason)


@pytest.fixture(scope="session")
def rank_pools(request: pytest.FixtureRequest) -> RankPools:
    """Every rank pool of the session, by PoolKey: ``rank_pools.get(PoolKey(2, "gloo", "cpu", 30.0))``."""
    return request.config.stash[pool_cache_key]


@pytest.fixture(scope="session")
def rank_pool(request: pytest.FixtureRequest, rank_pools: RankPools) -> RankPool:
    """The session's RankPool for this test's ``fuzzdist`` marker (default: 2 CPU ranks over gloo)."""
    key = getattr(request, "param", None)
    if key is None:  # used outside pytest_generate_tests' parametrization (e.g. by another fixture)
        requested = request.config.getoption("fuzzdist_world_size")
        world_size = requested.apply([DEFAULT_WORLD_SIZE])[0] if requested else DEFAULT_WORLD_SIZE
        key = PoolKey(world_size, "gloo", "cpu", request.config.getoption("fuzzdist_timeout"))
    try:
        return rank_pools.get(key)
    except CapabilityError as exc:
        pytest.skip(str(exc))


def _marker_world_sizes(nodeid: str, value: object) -> list[int]:
    """The ``fuzzdist`` marker's world sizes (an int or a list of them), else the default."""
    if value is None:
        return [DEFAULT_WORLD_SIZE]
    sizes = _as_list(value)
    if not sizes or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes):
        raise pytest.UsageError(
            f"{nodeid}: the fuzzdist marker's world_size must be a whole number of ranks "
            f"(at least 1) or a list of them, got {value!r}"
        )
    return sizes


def _as_list(value: object) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]
