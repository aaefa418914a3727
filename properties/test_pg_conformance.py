"""ProcessGroup conformance: the backend that ``--fuzzdist-pg module:callable`` builds (default:
gloo) keeps the c10d contract, operation by operation.

Each check runs under the current Hypothesis profile (``--hypothesis-profile``):
every operation (allreduce with each ReduceOp, broadcast, allgather in both
forms, reduce_scatter in both forms, alltoall and alltoall_base with uneven
splits, gather, scatter, reduce, send/recv, barrier) over drawn world sizes
(``--fuzzdist-pg-world-sizes``, default 1,2,3), dtypes, shapes, layouts and
roots; several operations in flight waited in a drawn order (``async``); and
DDP parity over the group (``ddp_parity``).  What the backend does not
implement is skipped with the reason (and listed in the terminal summary),
never failed.  See ``docs/backend-authors.md``.

    pytest properties/test_pg_conformance.py --fuzzdist-pg my_backend:make_group
"""

from __future__ import annotations

import pytest

from fuzzdist import known_bugs
from fuzzdist.conformance import ALL_CHECKS

# The fixtures come from the fuzzdist.conformance.plugin pytest plugin; importing them here keeps
# this file working where the plugin is not registered (then --fuzzdist-pg is not available, and
# the factory comes from $FUZZDIST_PG, default gloo).
from fuzzdist.conformance.plugin import pg_conformance, pg_factory  # noqa: F401


@pytest.mark.parametrize("check", ALL_CHECKS)
def test_pg_conforms(pg_conformance, check):  # noqa: F811 - the imported fixture
    """The group implements ``check`` correctly for every drawn input, or refuses it as unsupported."""
    report = pg_conformance.run(check)
    if report.status in ("unsupported", "not applicable", "skipped"):
        reasons = "; ".join(str(u) for u in report.unsupported) or report.note
        pytest.skip(f"{check} {report.status}" + (f": {reasons}" if reasons else ""))
    if report.failure is not None:
        pytest.fail(report.failure.message, pytrace=False)
    factory_errors = pg_conformance.report.factory_errors
    if factory_errors:
        pytest.fail(
            "the factory failed: " + "; ".join(f"world size {w}: {m}" for w, m in factory_errors.items()), pytrace=False
        )
    assert report.status in ("conforms", "known"), f"{check}: {report.status} ({report.note})"
    _tally_known(report.known)


def _tally_known(known: list[dict]) -> None:
    """Hand the check's sightings of known torch bugs (check-pg tallies them per operation) to the
    test's tally, so pytest reports the test KNOWN, as check-pg's own report does."""
    tally = known_bugs.current_tally()
    if tally is None:
        return
    bugs = known_bugs.registry()
    for k in known:
        seen = tally.sightings.get(k["id"])
        if seen is None:
            tally.sightings[k["id"]] = known_bugs.Sighting(bugs[k["id"]], k["count"], k["example"], k["failure"])
        else:
            seen.count += k["count"]
