"""Known bugs as torch 2.6.0 shows them: the same bug in other words (gloo's messages changed since)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fuzzdist import known_bugs
from fuzzdist.errors import RankCrash


@dataclass
class _Config:
    bucket_cap_mb: float | None = 1e-05
    find_unused_parameters: bool = True


@dataclass
class PowerSGDCase:  # the predicate knows comm_hooks' case by its class name
    config: _Config = field(default_factory=_Config)


def _crash(output: str, stack: str) -> RankCrash:
    return RankCrash([0], {0: -6}, {0: stack}, last_output={0: output})


IN_THE_HOOK = ('File "/venv/lib/python3.11/site-packages/torch/distributed/algorithms/ddp_comm_hooks/'
               'powerSGD_hook.py", line 589 in unpack_uncompressed_tensors_and_allreduce_ps')
ENFORCE_2_13 = ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at "
                "pair.cc:456] op.preamble.length <= op.nbytes. 8 vs 4. Received data size doesn't match expected "
                "size. Is there a distributed collective mismatch in your code?")
ENFORCE_2_6 = ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at "
               "/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes. 40 vs 8")


def _recognised(failure: RankCrash, case: object = None) -> str | None:
    bug = known_bugs.recognise("comm_hooks", {"case": case or PowerSGDCase()}, failure)
    return bug.id if bug else None


def test_powersgd_abort_in_torch_2_6s_words_is_the_known_bug():
    assert _recognised(_crash(ENFORCE_2_13, IN_THE_HOOK)) == "powersgd-multiple-buckets-hangs"
    assert _recognised(_crash(ENFORCE_2_6, IN_THE_HOOK)) == "powersgd-multiple-buckets-hangs"


def test_powersgd_abort_elsewhere_or_for_another_reason_stays_a_failure():
    assert _recognised(_crash(ENFORCE_2_6, 'File "model.py", line 3 in forward')) is None  # not in the hook
    assert _recognised(_crash("terminate called: some other enforce", IN_THE_HOOK)) is None
    one_bucket = PowerSGDCase(_Config(bucket_cap_mb=None, find_unused_parameters=False))
    assert _recognised(_crash(ENFORCE_2_6, IN_THE_HOOK), one_bucket) is None
