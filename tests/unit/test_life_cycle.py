"""One life cycle for every use of a testbed (`testbed.backends.life_cycle`, used by the sweep, the task
stream and the benchmarks): left as it was found, also when the use fails."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contracts.errors import UserError
from contracts.profiles import LinkSpec
from testbed.backends.life_cycle import LabUse

INVENTORY_LINK = LinkSpec(up_rate=100_000_000, down_rate=100_000_000)


class Lab:
    """A lab's life cycle as calls: what the use did to it, in order."""

    def __init__(self, up: bool, in_force: LinkSpec | None = None, shape_fails: bool = False) -> None:
        self.inv = type("Inventory", (), {"link": INVENTORY_LINK, "prefix": "tb"})()
        self.running, self.in_force, self.shape_fails = up, in_force or INVENTORY_LINK, shape_fails
        self.calls: list[tuple] = []

    def is_up(self) -> bool:
        return self.running

    def up(self, start_server: bool = True) -> bool:
        self.calls.append(("up", start_server))
        brought, self.running = not self.running, True
        return brought

    def down(self) -> list[str]:
        self.calls.append(("down",))
        self.running = False
        return []

    def link_in_force(self) -> LinkSpec:
        return self.in_force

    def shape(self, link: LinkSpec, dry_run: bool = False) -> list[dict]:
        self.calls.append(("shape", link.up_rate))
        if self.shape_fails:
            raise UserError("the appliance's agent is gone")
        return []


def test_a_testbed_that_was_down_is_brought_up_and_taken_down_again():
    lab = Lab(up=False)
    with LabUse(lab) as use:
        assert use.brought_up and not use.was_up
    assert lab.calls == [("up", True), ("down",)] and not lab.running


def test_a_testbed_kept_up_is_left_shaped_as_its_inventory_says():
    lab = Lab(up=False)
    with LabUse(lab, keep_up=True):
        pass
    assert lab.calls == [("up", True), ("shape", INVENTORY_LINK.up_rate)] and lab.running


def test_a_testbed_that_was_up_stays_up_with_the_link_that_was_in_force():
    lab = Lab(up=True, in_force=replace(INVENTORY_LINK, up_rate=20_000_000))
    with pytest.raises(KeyboardInterrupt), LabUse(lab) as use:
        assert use.was_up and not use.brought_up
        raise KeyboardInterrupt
    assert lab.calls == [("up", True), ("shape", 20_000_000)] and lab.running


def test_a_failing_end_does_not_hide_the_failure_under_way_but_is_raised_alone():
    lab = Lab(up=True, shape_fails=True)
    with pytest.raises(RuntimeError, match="the use's own"), LabUse(lab):
        raise RuntimeError("the use's own failure")
    with pytest.raises(UserError, match="agent is gone"), LabUse(lab):
        pass
