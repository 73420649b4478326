"""The throttle's period alignment: where a period starts, and what it finds in a cgroup."""

from __future__ import annotations

import pytest

from client import throttle
from client.cpulimit import CGROUP_ENV


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


def test_the_period_comes_from_the_cgroup_the_wrapper_named(tmp_path, monkeypatch):
    cg = tmp_path / "cpu" / "tb-client"
    cg.mkdir(parents=True)
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    (cg / "cpu.cfs_quota_us").write_text("1000")
    (cg / "cpu.cfs_period_us").write_text("25000")
    monkeypatch.setenv(CGROUP_ENV, "tb-client")
    assert throttle.in_force(root=tmp_path) == throttle.Period(0.025, 0.001)
    (cg / "cpu.cfs_quota_us").write_text("-1")
    assert throttle.in_force(root=tmp_path) is None  # no quota in force
    assert throttle.in_force("tb-other", root=tmp_path) is None  # no such cgroup
    monkeypatch.delenv(CGROUP_ENV)
    assert throttle.in_force(root=tmp_path) is None and not throttle.Aligner()()
