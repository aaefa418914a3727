"""Cost of torch's own multi-process test harness, per test (private helper of
``bench/pool_overhead.py``).

What is measured
----------------
``torch.testing._internal.common_distributed.MultiProcContinuousTest`` is the
harness PyTorch uses for its own distributed tests: on the first test of a
class it spawns ``world_size`` rank processes (``spawn`` start method), each
rank joins a process group (``FileStore`` rendezvous, here the gloo backend on
CPU), and then every test method of the class is dispatched by name over a
``multiprocessing`` queue to all ranks, which run it and report back over a
second queue.  ``tearDownClass`` tells the ranks to exit and joins them.

The check run by every test method is the same tiny broadcast::

    rank 0 fills a 16-element float32 tensor from a fixed per-test seed,
    torch.distributed.broadcast(t, src=0),
    every rank regenerates the expected values from the same seed and
    raises AssertionError unless torch.equal(t, expected).

Two classes are generated at import time, ``Bcast<small>`` and
``Bcast<large>`` (default 10 and 1000 test methods), with world_size forced to
2, ``backend_str() -> "gloo"`` and ``device_type() -> "cpu"``.  Each class is
run the way torch runs it: a ``unittest.TextTestRunner`` (output to stderr) on
``TestLoader().loadTestsFromTestCase(cls)``.  ``T(n)`` is the wall time of that
``runner.run(suite)`` call, so it includes the lazy spawn + process-group init
done in the first ``setUp``, every test, and the ``tearDownClass`` join.

Figures reported
----------------
* ``per_test_us = (T(large) - T(small)) / (large - small)`` -- the steady-state
  cost of one test, start-up and tear-down cancelled out.
* ``startup_s = T(small) - small * per_test`` -- the fixed cost of a class:
  spawning the rank processes (each re-imports torch and this module as
  ``__mp_main__``), process-group init, and the final join.
* ``first_test_s`` -- the duration of the first test as recorded by the test
  result (``startTest``..``stopTest``) of the large class; it contains the
  spawn + init but not the tear-down, so ``first_test_s - per_test`` is a
  second, independent estimate of spawn + init (``startup_first_s``).
* ``per_test_steady_us`` -- cross-check of ``per_test_us`` taken inside the
  large class alone: (last ``stopTest`` - first ``stopTest``) / (large - 1);
  immune to the run-to-run noise of spawn/init (~0.5 s), which otherwise
  shows up in ``per_test_us`` divided by (large - small).
* ``teardown_s`` -- time from the last ``stopTest`` to the end of
  ``runner.run`` in the large class (``tearDownClass``: queue the exit pill
  and join the ranks, which also destroy their process group).

How it runs
-----------
``measure()`` (and the command line without ``--inner``) runs this file again
in a child interpreter with ``--inner`` under a hard ``subprocess`` timeout,
in its own session so that the whole tree (inner parent + spawned ranks) can be
killed if anything hangs: the harness itself waits up to 300 s per test for a
rank's result and joins the ranks without any timeout.  The class sizes travel
to the inner process -- and from it to the spawned ranks, which re-import this
file and must find the same classes -- through the environment variable
``FUZZDIST_TORCH_HARNESS_SIZES``; when it is unset (plain ``import``), torch
is not imported at all.

Usage::

    python bench/_torch_harness.py [--small 10] [--large 1000] [--world-size 2] [--json]

With ``--json`` the last line of stdout is a JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

_SIZES_ENV = "FUZZDIST_TORCH_HARNESS_SIZES"
_WORLD_SIZE_ENV = "FUZZDIST_TORCH_HARNESS_WORLD_SIZE"  # read here and in the ranks, which re-import this file
_WORLD_SIZE = int(os.environ.get(_WORLD_SIZE_ENV, "2"))
_NUMEL = 16
_DEFAULT_TIMEOUT_S = 240.0


# ---------------------------------------------------------------------------
# Test classes (built at import time, also inside the spawned ranks)
# ---------------------------------------------------------------------------


def _expected(seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(_NUMEL, generator=g, dtype=torch.float32)


_EXAMPLES_ENV = "FUZZDIST_TORCH_HARNESS_EXAMPLES"
_examples_cache: list = []


def _property_examples() -> list:
    """The broadcast property's examples (spec, src, seed), pickled by bench/pool_overhead.py.

    When the variable is set, every test runs the property's own rank function
    on one of them, so torch's harness does exactly the check fuzzdist does.
    """
    path = os.environ.get(_EXAMPLES_ENV)
    if path and not _examples_cache:
        import pickle

        with open(path, "rb") as f:
            _examples_cache.extend(pickle.load(f))
    return _examples_cache


class _Ctx:
    def __init__(self, rank: int, world_size: int) -> None:
        import torch

        self.rank, self.world_size, self.device, self.group = rank, world_size, torch.device("cpu"), None


def _make_test(seed: int):
    def test(self):
        import torch
        import torch.distributed as dist

        examples = _property_examples()
        if examples:
            from fuzzdist.properties import broadcast

            # A difference is returned work, not a failure: a transposed spec meets the known torch bug
            # gloo-broadcast-ignores-strides, and the pool and the raw loop do the same on it.
            broadcast.broadcast_and_check(_Ctx(self.rank, self.world_size), *examples[seed % len(examples)])
            return
        if self.rank == 0:
            t = _expected(seed)
        else:
            t = torch.zeros(_NUMEL, dtype=torch.float32)
        dist.broadcast(t, src=0)
        if not torch.equal(t, _expected(seed)):
            raise AssertionError(f"rank {self.rank}: broadcast mismatch for seed {seed}")

    test.__name__ = f"test_bcast_{seed}"
    return test


def _build_classes(sizes):
    from torch.testing._internal.common_distributed import MultiProcContinuousTest

    class _BcastBase(MultiProcContinuousTest):
        world_size = _WORLD_SIZE  # class var: _get_world_size uses it as-is

        @classmethod
        def backend_str(cls):
            return "gloo"

        @classmethod
        def device_type(cls):
            return "cpu"

    built = {}
    for n in sizes:
        name = f"Bcast{n}"
        ns = {f"test_bcast_{i:05d}": _make_test(i) for i in range(n)}
        cls = type(name, (_BcastBase,), ns)
        cls.__module__ = __name__
        cls.__qualname__ = name
        built[name] = cls
    return built


def _sizes_from_env():
    raw = os.environ.get(_SIZES_ENV, "").strip()
    if not raw:
        return []
    return [int(x) for x in raw.split(",") if x]


if _sizes_from_env():
    globals().update(_build_classes(_sizes_from_env()))


# ---------------------------------------------------------------------------
# In-process measurement (runs in the --inner child)
# ---------------------------------------------------------------------------


def _run_class(cls):
    import unittest

    stamps = []

    class _TimedResult(unittest.TextTestResult):
        def startTest(self, test):
            stamps.append(("start", time.perf_counter()))
            super().startTest(test)

        def stopTest(self, test):
            super().stopTest(test)
            stamps.append(("stop", time.perf_counter()))

    suite = unittest.TestLoader().loadTestsFromTestCase(cls)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=0, resultclass=_TimedResult)
    t0 = time.perf_counter()
    result = runner.run(suite)
    t1 = time.perf_counter()
    if not result.wasSuccessful() or result.testsRun != suite.countTestCases():
        problems = [str(t) + "\n" + tb for t, tb in (result.errors + result.failures)[:3]]
        raise RuntimeError(
            f"{cls.__name__}: ran {result.testsRun}, errors={len(result.errors)}, "
            f"failures={len(result.failures)}, skipped={len(result.skipped)}\n" + "\n".join(problems)
        )
    starts = [t for k, t in stamps if k == "start"]
    stops = [t for k, t in stamps if k == "stop"]
    return {
        "total_s": t1 - t0,
        "first_test_s": stops[0] - starts[0],
        "teardown_s": t1 - stops[-1],
        # steady state inside the class: first stop .. last stop, no spawn/join
        "steady_per_test_s": (stops[-1] - stops[0]) / max(1, len(stops) - 1),
        "tests": result.testsRun,
    }


def _measure_inprocess(small: int, large: int) -> dict:
    import torch

    g = globals()
    rs = _run_class(g[f"Bcast{small}"])
    rl = _run_class(g[f"Bcast{large}"])
    per_test = (rl["total_s"] - rs["total_s"]) / (large - small)
    return {
        "startup_s": rs["total_s"] - small * per_test,
        "per_test_us": per_test * 1e6,
        "t_small_s": rs["total_s"],
        "t_large_s": rl["total_s"],
        "small": small,
        "large": large,
        "first_test_s": rl["first_test_s"],
        "startup_first_s": rl["first_test_s"] - per_test,
        "teardown_s": rl["teardown_s"],
        "per_test_steady_us": rl["steady_per_test_s"] * 1e6,
        "world_size": _WORLD_SIZE,
        "backend": "gloo",
        "torch": torch.__version__,
    }


# ---------------------------------------------------------------------------
# Bounded driver
# ---------------------------------------------------------------------------


def measure(
    small: int = 10,
    large: int = 1000,
    timeout: float = _DEFAULT_TIMEOUT_S,
    world_size: int = 2,
    env: dict | None = None,
) -> dict:
    """Run the measurement in a child interpreter (bounded by ``timeout``) and
    return the figures as a dict.  Raises RuntimeError on failure/timeout."""
    if not (0 < small < large):
        raise ValueError("need 0 < small < large")
    env = dict(os.environ if env is None else env)
    env[_SIZES_ENV] = f"{small},{large}"
    env[_WORLD_SIZE_ENV] = str(world_size)
    cmd = [sys.executable, os.path.abspath(__file__), "--inner", "--small", str(small), "--large", str(large)]
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # own process group: ranks die with it on timeout
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate(timeout=30)
        raise RuntimeError(f"torch harness timed out after {timeout}s\n--- stderr tail ---\n{err[-4000:]}") from None
    finally:
        # Reap any rank process left behind in the group (normally none).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"torch harness failed (rc={proc.returncode})\n--- stderr tail ---\n{err[-4000:]}")
    return json.loads(lines[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=10)
    ap.add_argument("--large", type=int, default=1000)
    ap.add_argument("--json", action="store_true", help="print a JSON object on the last line")
    ap.add_argument("--timeout", type=float, default=_DEFAULT_TIMEOUT_S)
    ap.add_argument("--world-size", type=int, default=_WORLD_SIZE)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.inner:
        print(json.dumps(_measure_inprocess(args.small, args.large)), flush=True)
        return 0

    res = measure(args.small, args.large, timeout=args.timeout, world_size=args.world_size)
    if args.json:
        print(json.dumps(res))
    else:
        print(f"torch {res['torch']} MultiProcContinuousTest, world_size={res['world_size']}, gloo/CPU")
        print(f"T({res['small']}) = {res['t_small_s']:.3f} s, T({res['large']}) = {res['t_large_s']:.3f} s")
        print(
            f"per test         : {res['per_test_us']:.1f} us "
            f"(steady state in large class: {res['per_test_steady_us']:.1f} us)"
        )
        print(f"start-up (+join) : {res['startup_s']:.3f} s")
        print(f"first test       : {res['first_test_s']:.3f} s (spawn+init ~ {res['startup_first_s']:.3f} s)")
        print(f"tear-down (join) : {res['teardown_s']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
