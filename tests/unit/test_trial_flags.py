"""A trial is marked `emulation_flagged` by its own stages against its devices' targets (issue 44, item 3)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contracts.stage_targets import stage_targets
from contracts.worker_api import TrialResult
from testbed.devices import load_device
from testbed.sweep.bookkeeping import own_stages_missed
from testbed.sweep.plan import Trial
from tests.fakes import FAKE_SWEEP

P4, I3 = load_device("paper-p4"), load_device("paper-i3")
REMOTE = Trial(
    trial=1, op="mul", size=400, dtype="float64", rate_mbps=10.0, method="raw", rep=0, server="python"
)


def on_target(t: Trial, client=P4, server=I3, **off: float) -> TrialResult:
    """The trial's result with every stage at its target, `off` (column -> factor) the exceptions."""
    targets = stage_targets(t.op, t.size, t.method, 8, client, server)
    return TrialResult(ok=True, **{"t_total": 1.0, **{c: v * off.get(c, 1.0) for c, v in targets.items()}})


def test_a_trial_on_its_targets_is_not_marked_and_one_whose_own_stage_missed_is():
    assert own_stages_missed(FAKE_SWEEP, REMOTE, on_target(REMOTE), P4, I3) == []
    slow = on_target(REMOTE, t_server_compute=1.25)
    assert own_stages_missed(FAKE_SWEEP, REMOTE, slow, P4, I3) == ["t_server_compute"]
    local = replace(REMOTE, method="local", rate_mbps=None, server="")
    assert own_stages_missed(FAKE_SWEEP, local, on_target(local, t_total=0.85), P4, I3) == ["t_total"]


def test_a_short_stage_is_judged_by_the_ms_part_and_the_experiment_sets_both():
    short = replace(REMOTE, size=20)
    encode = stage_targets("mul", 20, "raw", 8, P4, None)["t_client_encode"]
    assert 0.09e-3 / encode > 0.10  # 0.09 ms over is more than 10% of this stage
    result = on_target(short, server=None, t_client_encode=1 + 0.09e-3 / encode)
    assert own_stages_missed(FAKE_SWEEP, short, result, P4, None) == []  # within max(10%, 0.1 ms)
    strict = replace(FAKE_SWEEP, device_tolerance_pct=1.0, device_tolerance_ms=0.01)
    assert own_stages_missed(strict, short, result, P4, None) == ["t_client_encode"]


def test_the_server_stages_of_another_language_and_an_untimed_start_up_are_not_judged():
    # the sweep passes no server device for grpc@cpp: its stages have no target
    cpp = replace(REMOTE, method="grpc", server="cpp")
    assert own_stages_missed(FAKE_SWEEP, cpp, on_target(cpp, server=None), P4, None) == []
    targets = stage_targets("mul", 400, "json", 8, P4, I3)
    assert ("t_server_start" in targets) == ("server_start" in I3.stack)
    result = replace(on_target(REMOTE, t_server_encode=3.0), t_server_start=None)
    assert own_stages_missed(FAKE_SWEEP, REMOTE, result, P4, I3) == ["t_server_encode"]


@pytest.mark.parametrize(
    "column", ["t_client_encode", "t_client_decode", "t_server_decode", "t_server_encode"]
)
def test_every_stage_of_a_remote_trial_is_its_own(column):
    assert own_stages_missed(FAKE_SWEEP, REMOTE, on_target(REMOTE, **{column: 2.0}), P4, I3) == [column]
