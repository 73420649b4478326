"""The check of every shaped trial against the shaping it asked for (testbed/link/guard.py)."""

from __future__ import annotations

import time

from contracts.agent_answers import HtbClass
from contracts.worker_api import TrialResult
from testbed.link.guard import ShapingGuard, SwitchWatch
from tests.fake_answers import htb_class

RATE = 20_000_000


def classes(
    up_bytes: int, down_bytes: int, up_rate: int = RATE, down_rate: int = RATE
) -> dict[str, HtbClass]:
    return {"a1": htb_class(up_rate, up_bytes), "a0": htb_class(down_rate, down_bytes)}


def guard() -> ShapingGuard:
    return ShapingGuard(RATE, "a1", "a0", classes(1_000, 2_000))


TRIAL = TrialResult(ok=True, t_total=1.0, bytes_up=50_000, bytes_down=25_000)


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
    assert guard().check(classes(1_000, 2_000), TrialResult(ok=False, error="refused")) is None
    assert guard().check({}, TrialResult(ok=False, error="refused")).count("no HTB class") == 2


def test_with_several_clients_each_reading_is_checked_from_the_first_against_every_payload_since():
    g = ShapingGuard(RATE, "a1", "a0", classes(1_000, 2_000), since_start=True)
    assert g.check(classes(60_000, 30_000), TRIAL) is None
    # two trials' payloads by now, and the counters since the first reading carried only one's
    assert "the trial bypassed the shaping" in g.check(classes(60_000, 30_000), TRIAL)
    assert g.check(classes(1_000 + 150_000, 2_000 + 75_000), TRIAL) is None  # three trials' worth


# ------------------------------------------------------------------ the switch watched while a trial runs
DOWN = ["ovs-vswitchd is not running"]


def watched(answers: list, seconds: float, every_s: float = 0.01) -> tuple[SwitchWatch, list, list]:
    """A watch over a trial of `seconds`, asking `answers` in turn (the last one again after); what it
    asked and what it ended."""
    asked, ended = [], []

    def problems() -> list[str]:
        asked.append(time.monotonic())
        answer = answers[min(len(asked), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    with SwitchWatch(problems, lambda: ended.append(time.monotonic()), every_s) as watch:
        time.sleep(seconds)
    return watch, asked, ended


def test_a_healthy_switch_is_asked_after_every_few_moments_and_nothing_is_ended():
    watch, asked, ended = watched([[]], 0.1)
    assert len(asked) >= 2 and ended == [] and watch.found == [] and not watch.ended
    n = len(asked)
    time.sleep(0.05)
    assert len(asked) == n, "nothing is asked once the trial is over"


def test_a_trial_shorter_than_the_interval_asks_nothing():
    _, asked, ended = watched([DOWN], 0.0, every_s=5.0)
    assert asked == [] and ended == []


def test_a_dead_switch_ends_the_trial_once_and_is_kept():
    watch, asked, ended = watched([[], DOWN], 0.2)
    assert len(ended) == 1 and len(asked) == 2 and watch.found == DOWN and watch.ended


def test_a_question_that_fails_stops_the_watch_without_ending_the_trial():
    watch, asked, ended = watched([RuntimeError("the agent is gone")], 0.1)
    assert len(asked) == 1 and ended == [] and not watch.ended
