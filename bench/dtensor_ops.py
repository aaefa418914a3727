"""Examples per second of the DTensor-operator property at 2 ranks: drawn cases run through ``check`` on
one pool for a fixed time, counted from after a warm-up (``--warm-up`` examples, default 5, not counted)
that starts the pool, builds the meshes and imports what a rank's first DTensor call imports.

    .venv/bin/python bench/dtensor_ops.py --seconds 60
"""

from __future__ import annotations

import argparse
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzdist import RankPool, known_bugs
from fuzzdist.properties import dtensor_ops


def warm_up(pool: RankPool, world_size: int, examples: int) -> None:
    """Run ``examples`` drawn cases on ``pool``, uncounted and untimed (failures included)."""

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(dtensor_ops.op_cases(world_size))
        try:
            dtensor_ops.check(pool, case)
        except Exception:  # noqa: BLE001 - the warm-up only warms: no failure of it is Hypothesis's to replay
            pass

    if examples > 0:
        with known_bugs.collecting():
            run()


def main() -> None:
    """Run the property for ``--seconds`` and print examples/s."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--warm-up", type=int, default=5, help="examples run before the clock starts")
    options = parser.parse_args()
    pool = RankPool(options.world_size, timeout=30).start()
    done = {"n": 0, "failed": 0}
    deadline = [0.0]
    warm_up(pool, options.world_size, options.warm_up)

    @settings(max_examples=10**6, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        if time.monotonic() > deadline[0]:
            return
        case = data.draw(dtensor_ops.op_cases(options.world_size))
        try:
            dtensor_ops.check(pool, case)
        except AssertionError:
            done["failed"] += 1
        done["n"] += 1
        if time.monotonic() > deadline[0]:
            raise KeyboardInterrupt

    try:
        deadline[0] = time.monotonic() + options.seconds
        start = time.monotonic()
        with known_bugs.collecting():
            run()
    except KeyboardInterrupt:
        pass
    finally:
        elapsed = time.monotonic() - start
        pool.close()
    print(
        f"{done['n']} examples in {elapsed:.1f} s at {options.world_size} ranks: {done['n'] / elapsed:.1f} "
        f"examples/s ({done['failed']} failed)"
    )


if __name__ == "__main__":
    main()
