"""The throttle's period alignment: where a period starts, and what it finds in a cgroup."""

from __future__ import annotations

import pytest

from client import throttle
from client.cpulimit import CGROUP_ENV, CpuLimit
from contracts.errors import UserError


class Clock:
    """perf_counter readings: a busy loop's small steps, with a jump where the kernel throttled us."""

    def __init__(self, gap_at: int | None, step: float = 1e-5, gap: float = 0.02) -> None:
        self.n, self.now, self.gap_at, self.step, self.gap = 0, 0.0, gap_at, step, gap

    def __call__(self) -> float:
        self.n += 1
        self.now += self.gap if self.n == self.gap_at else self.step
        return self.now


def test_align_waits_for_the_throttled_gap_then_spends_half_a_quota(monkeypatch):
    spent = []
    monkeypatch.setattr(throttle, "spend_cpu", spent.append)
    clock = Clock(gap_at=500)
    assert throttle.align(throttle.Period(0.025, 0.001), clock=clock)
    assert clock.n == 500  # it went on until the gap and no further
    assert spent == [0.0005]


def test_no_gap_within_three_periods_gives_up(monkeypatch):
    monkeypatch.setattr(throttle, "spend_cpu", lambda s: pytest.fail("spent CPU without a period start"))
    clock = Clock(gap_at=None, step=1e-3)
    assert not throttle.align(throttle.Period(0.025, 0.001), clock=clock)
    assert clock.now == pytest.approx(3 * 0.025 + 0.05, abs=2e-3)


def test_nothing_to_align_without_a_quota_or_with_a_whole_period():
    assert not throttle.align(None)
    assert not throttle.align(throttle.Period(0.001, 0.001))


def v1_cgroup(tmp_path, quota: str = "1000", period: str = "25000"):
    cg = tmp_path / "cpu" / "tb-client"
    cg.mkdir(parents=True)
    (cg / "cpu.cfs_quota_us").write_text(quota)
    (cg / "cpu.cfs_period_us").write_text(period)
    return cg


def test_the_period_comes_from_the_cgroup_the_wrapper_handed_down(tmp_path, monkeypatch):
    cg = v1_cgroup(tmp_path)
    monkeypatch.setenv(CGROUP_ENV, str(cg))  # `python -m client.cpulimit` sets it for the command it runs
    assert throttle.in_force() == throttle.Period(0.025, 0.001)
    (cg / "cpu.cfs_quota_us").write_text("-1")
    assert throttle.in_force() is None  # no quota in force
    monkeypatch.setenv(CGROUP_ENV, str(tmp_path / "gone"))
    assert throttle.in_force() is None  # no such cgroup
    monkeypatch.delenv(CGROUP_ENV)
    assert throttle.in_force() is None and not throttle.Aligner()()


def test_each_stage_runs_under_its_kind_of_works_quota(tmp_path, monkeypatch):
    cg = v1_cgroup(tmp_path)
    aligned = []
    monkeypatch.setattr(throttle, "align", lambda period: aligned.append(period) or True)
    quotas = {"kernel|mul|400": 0.008, "encode|json|mul|400": 0.25, "base": 0.005}
    aligner = throttle.Aligner(CpuLimit(cg.name, 1.0, path=cg), quotas)
    held = []
    real_apply = CpuLimit.apply
    monkeypatch.setattr(CpuLimit, "apply", lambda self: held.append(self.fraction) or real_apply(self))

    aligner.trial("mul", 400, "json")
    assert aligner("encode")
    assert (cg / "cpu.cfs_quota_us").read_text() == "1000" and (
        cg / "cpu.cfs_period_us"
    ).read_text() == "4000"
    assert aligned[-1] == throttle.Period(0.004, 0.001)  # aligned to the period just put in force
    assert not aligner("request")  # the request: the base quota, nothing to align
    assert (cg / "cpu.cfs_period_us").read_text() == "200000" and len(aligned) == 1
    assert aligner("decode")  # no quota for json decode in the calibration: the base one
    aligner.trial("mul", 400, "local")
    assert aligner("kernel") and aligner("kernel")
    assert held == [0.25, 0.005, 0.008]  # written only when it changes: a write refills the quota


def test_per_work_quotas_need_the_cgroup(monkeypatch):
    monkeypatch.delenv(CGROUP_ENV, raising=False)
    with pytest.raises(UserError, match="cgroup the process runs in"):
        throttle.Aligner(quotas={"base": 0.01})


def test_the_check_leaves_a_whole_core_for_the_probes_after_it(tmp_path, monkeypatch):
    """`client.calibration` probes the host after the check in the same process: the last work's
    quota still in force would time the quota, not the host."""
    from client import throttle_check
    from contracts.device import Grid
    from testbed.devices import load_device

    cg = v1_cgroup(tmp_path)
    monkeypatch.setenv(CGROUP_ENV, str(cg))
    monkeypatch.setattr(throttle, "align", lambda period: True)
    held = []
    real_apply = CpuLimit.apply
    monkeypatch.setattr(CpuLimit, "apply", lambda self: held.append(self.fraction) or real_apply(self))

    def sampled(works, reps, rel, budget_s, settled, clock, seed, batch, before):
        for i in range(len(works)):
            before(i)  # each work's quota put in force, as the sampling does before its samples
        return [0.01] * len(works), [reps] * len(works)

    monkeypatch.setattr(throttle_check, "mean_seconds", sampled)
    quotas = {"kernel|mul|100": 0.2, "base": 0.1}
    device = load_device("paper-p4")
    check = throttle_check.check_wall(device, Grid.of(["mul"], [100], ["raw"]), quotas=quotas)
    assert check.rows and 0.2 in held and 0.1 in held
    assert held[-1] == 1.0
