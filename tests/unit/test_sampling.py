"""How the scaled calibration samples work: rounds, the median's confidence interval, and sampling
until each median is precise or the work's budget is spent. Work runs on a fake clock that each job
advances by its own sequence of durations, so every count below is worked out by hand (durations are binary fractions: sums stay exact)."""

from __future__ import annotations

import itertools
import time

from client.sampling import SelfTimed, mean_seconds, precise, sampled
from contracts.profiles import too_short


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[int] = []

    def __call__(self) -> float:
        return self.now

    def job(self, index: int, durations: list[float]):
        """Work `index` that takes the next of `durations` (cycling) each time it runs."""
        cycle = itertools.cycle(durations)

        def run() -> None:
            self.calls.append(index)
            self.now += next(cycle)

        return run


def test_a_mean_is_precise_when_its_confidence_interval_is_narrow_enough():
    # 1..5: mean 3, standard deviation 1.581, t(4) = 2.776: half-width 1.963, 65.4% of the mean
    assert precise([1.0, 2.0, 3.0, 4.0, 5.0], 0.66)
    assert not precise([1.0, 2.0, 3.0, 4.0, 5.0], 0.65)
    assert precise([1.0] * 6, 0.0)
    assert not precise([1.0], 1.0)  # one sample says nothing of its spread


def test_without_enough_every_work_gets_exactly_the_rounds():
    clock = FakeClock()
    jobs = [clock.job(0, [0.0625]), clock.job(1, [0.125, 0.375])]
    samples = sampled(jobs, 4, clock=clock)
    assert samples == [[0.0625] * 4, [0.375, 0.125, 0.375, 0.125]]  # the untimed first run took 0.125


def test_short_work_is_repeated_within_a_sample_and_divided():
    clock = FakeClock()
    samples = sampled([clock.job(0, [1 / 256])], 2, clock=clock)
    assert samples == [[1 / 256, 1 / 256]]
    assert len(clock.calls) == 1 + 2 * 6  # one run to learn its length, then 6 per sample of 20 ms


def test_noisy_work_is_sampled_until_precise_and_steady_work_stops_at_the_rounds():
    clock = FakeClock()
    steady = clock.job(0, [0.0625])
    noisy = clock.job(1, [0.0625, 0.1875])  # median 0.125, every sample 50% off it
    samples = sampled(
        [steady, noisy], 4, clock=clock, enough=lambda _, s: precise(s, 0.5), budget_s=100, max_rounds=50
    )
    assert len(samples[0]) == 4
    # alternating samples 0.1875, 0.0625: the mean's half-width is 92% of it at n=4 (t(3) = 3.182),
    # 58% at n=6 (t(5) = 2.571) and 45% at n=8 (t(7) = 2.365): precise within 50% at n=8
    assert len(samples[1]) == 8
    samples = sampled(
        [steady, noisy], 4, clock=clock, enough=lambda _, s: precise(s, 0.05), budget_s=100, max_rounds=16
    )
    assert len(samples[0]) == 4
    assert len(samples[1]) == 16  # 5% would take over 200 samples: sampled up to max_rounds


def test_sampling_stops_at_the_works_budget():
    clock = FakeClock()
    noisy = clock.job(1, [0.125, 0.375])
    cheap = clock.job(0, [1 / 32])
    samples = sampled([cheap, noisy], 2, clock=clock, enough=lambda _, s: False, budget_s=1.2, max_rounds=100)
    # two rounds spend 0.5 s; pairs of rounds add 0.5 s each: 1.0 s after four, 1.5 s after six
    assert len(samples[1]) == 6
    assert sum(samples[1]) == 1.5
    assert len(samples[0]) == 40  # cheaper work: 38 samples spend 1.1875 s, 40 spend 1.25 s
    samples = sampled([cheap, noisy], 2, clock=clock, enough=lambda _, s: False, max_rounds=10)
    assert [len(s) for s in samples] == [10, 10]  # within the default budget: up to max_rounds


def test_work_alone_in_a_round_follows_the_work_closest_to_it_in_length_never_itself():
    clock = FakeClock()
    jobs = [clock.job(0, [0.0625]), clock.job(1, [0.125, 0.375]), clock.job(2, [1.0])]
    sampled(jobs, 2, clock=clock, enough=lambda _, s: s[0] == s[-1], max_rounds=20)
    extra = clock.calls[3 + 2 * 3 :]  # after the first runs and the two full rounds
    # work 1 alone: its first run took 0.125, closer to work 0 (0.0625: half) than to 2 (1.0: 8x)
    assert extra == [0, 1] * 18


def test_a_throttles_alignment_counts_against_the_budget():
    clock = FakeClock()

    def align(i: int) -> None:
        clock.now += 0.5  # waiting for a quota period, outside the sample

    samples = sampled(
        [clock.job(0, [0.0625])],
        2,
        clock=clock,
        batch=False,
        before=align,
        enough=lambda _, s: False,
        budget_s=1.2,
    )
    assert samples == [[0.0625] * 4]  # 0.5625 per sample: 1.125 after two rounds, 2.25 after four


def test_mean_seconds_says_how_many_samples_each_mean_took():
    clock = FakeClock()
    jobs = [clock.job(0, [0.0625]), clock.job(1, [0.0625, 0.1875])]
    means, counts = mean_seconds(jobs, 4, 0.5, clock=clock)
    assert means == [0.0625, 0.125]
    assert counts == [4, 8]  # as in the test of precise sampling above
    means, counts = mean_seconds(jobs, 4, 0.5, settled=[False, True], clock=clock)
    assert counts == [4, 4]  # settled beforehand (throttle: too short to trust): no more than reps


def test_work_shorter_than_ten_of_its_quota_periods_is_too_short_to_trust():
    # 0.04 of a core: 1 ms every 25 ms; 0.001: 1 ms every 1 s (the longest period)
    assert too_short(0.249, 0.04) and not too_short(0.25, 0.04)
    assert too_short(9.9, 0.001) and not too_short(10.0, 0.001)


def test_a_self_timed_work_pays_its_whole_run_against_the_budget():
    """A child process reports a stage of a millisecond but takes tens of them to start and run: the
    budget counts the run (here a 20 ms sleep), or a noisy stage would be sampled max_rounds times."""
    child = SelfTimed(lambda: (time.sleep(0.02), 0.001)[1])
    samples = sampled([child], 2, enough=lambda _, s: False, budget_s=0.1, max_rounds=400)
    assert 4 <= len(samples[0]) <= 6 and set(samples[0]) == {0.001}
