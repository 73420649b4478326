"""The check of every shaped trial against the shaping it asked for (testbed/link/guard.py)."""

from __future__ import annotations

from contracts.agent_answers import HtbClass
from testbed.link.guard import ShapingGuard
from tests.fake_answers import htb_class

RATE = 20_000_000


def classes(
    up_bytes: int, down_bytes: int, up_rate: int = RATE, down_rate: int = RATE
) -> dict[str, HtbClass]:
    return {"a1": htb_class(up_rate, up_bytes), "a0": htb_class(down_rate, down_bytes)}


def guard() -> ShapingGuard:
    return ShapingGuard(RATE, "a1", "a0", classes(1_000, 2_000))


TRIAL = {"ok": True, "t_total": 1.0, "bytes_up": 50_000, "bytes_down": 25_000}


def test_a_trial_through_its_classes_passes_and_the_next_is_checked_from_there():
    g = guard()
    assert g.check(classes(60_000, 30_000), TRIAL) is None
    assert g.check(classes(60_000 + 51_000, 30_000 + 26_000), TRIAL) is None
    assert g.check(classes(60_000 + 51_000, 30_000 + 26_000), TRIAL) is not None  # nothing went through


def test_a_missing_class_names_the_port():
    wrong = guard().check({"a0": classes(0, 90_000)["a0"]}, TRIAL)
    assert wrong == "a1 (up) has no HTB class 1:10: the link was not shaped"


def test_a_wrong_rate_names_both_rates():
    wrong = guard().check(classes(60_000, 30_000, down_rate=100_000_000), TRIAL)
    assert wrong == "a0 (down) is shaped at 100mbit, not 20mbit"


def test_a_replaced_class_and_a_bypass_are_told_apart():
    assert "went back" in guard().check(classes(500, 30_000), TRIAL)
    bypass = guard().check(classes(1_000 + 4_000, 30_000), TRIAL)
    assert bypass == (
        "a1 (up) sent 4000 bytes through its class while the trial moved 50000 bytes that way: "
        "the trial bypassed the shaping"
    )


def test_a_failed_trial_without_bytes_is_checked_for_its_classes_only():
    assert guard().check(classes(1_000, 2_000), {"ok": False, "error": "refused"}) is None
    assert guard().check({}, {"ok": False, "error": "refused"}).count("no HTB class") == 2
