from collections import Counter

from contracts.run import COLUMNS, FORMAT_VERSION, TRIALS_MARK, TrialRecord, TrialWriter, read_trials, repair
from contracts.stages import LOCAL
from testbed.experiment import Experiment
from testbed.sweep.plan import plan_trials, rate_groups

EXP = Experiment(
    name="t",
    ops=("mul", "inv"),
    sizes=(100, 200),
    rates_mbps=(10.0, 40.0),
    methods=("json", "raw"),
    reps=3,
    seed=7,
)


def test_the_grid_and_the_local_baseline():
    trials = plan_trials(EXP)
    remote = [t for t in trials if t.method != LOCAL]
    local = [t for t in trials if t.method == LOCAL]
    assert len(remote) == 2 * 2 * 2 * 2 * 3
    assert len(local) == 2 * 2 * 3  # per (op, size), with the same repetitions
    assert all(t.rate_mbps is None for t in local)
    assert [t.trial for t in trials] == list(range(len(trials)))
    assert Counter(t.cell for t in remote).most_common(1)[0][1] == 3


def test_phases_run_local_first_then_rates_ascending_each_shuffled_reproducibly():
    trials = plan_trials(EXP)
    ph = rate_groups(EXP, trials)
    assert [p and p.rate_mbps for p, _ in ph] == [None, 10.0, 40.0]
    assert [p.seed_text() for p, _ in ph[1:]] == ["10.0", "40.0"]  # the seed runs before delays had
    assert sum(len(p) for _, p in ph) == len(trials)
    order = [t.trial for t in ph[1][1]]
    assert order != sorted(order)  # shuffled, so drift does not line up with a factor
    assert order == [t.trial for t in rate_groups(EXP, trials)[1][1]]  # and the same every time


def test_resume_skips_exactly_the_completed_trials():
    trials = plan_trials(EXP)
    done = {t.trial for t in trials[::3]}
    left = [t.trial for _, p in rate_groups(EXP, trials, done) for t in p]
    assert sorted(left) == sorted(set(range(len(trials))) - done)
    everything = {t.trial for t in trials}
    assert rate_groups(EXP, trials, everything) == []


def test_writer_appends_and_resume_reads_what_was_written(tmp_path):
    path = tmp_path / "trials.csv"
    w = TrialWriter(path)
    w.write(TrialRecord("mul", 100, "raw", True, run_id="r", trial=0, rate_mbps=10.0, t_total=0.5))
    w.write(
        TrialRecord("mul", 100, "raw", False, run_id="r", trial=1, rate_mbps=10.0, error="boom, with a comma")
    )
    w.close()
    w = TrialWriter(path)  # a resumed run appends, no second header
    w.write(TrialRecord("mul", 100, "raw", True, run_id="r", trial=2, rate_mbps=10.0, t_total=0.25))
    w.close()
    lines = path.read_text().splitlines()
    assert lines[:2] == [f"{TRIALS_MARK}{FORMAT_VERSION}", ",".join(COLUMNS)]
    assert len(lines) == 5
    assert read_trials(path).outcomes() == {0: 0.5, 1: None, 2: 0.25}  # what resume reads: failed = None


def test_a_row_cut_short_by_a_crash_is_dropped(tmp_path):
    path = tmp_path / "trials.csv"
    w = TrialWriter(path)
    w.write(TrialRecord("mul", 100, "raw", True, run_id="r", trial=0, rate_mbps=10.0, t_total=0.5))
    w.close()
    with open(path, "a") as f:
        f.write("r,1,mul,100,float64,10.0,raw,0,tr")  # the process died mid-row
    repair(path)
    assert read_trials(path).outcomes() == {0: 0.5}
    assert path.read_text().endswith("\n")


def test_the_trial_count_is_computed_without_building_the_plan():
    from dataclasses import replace

    from testbed.experiment import planned_trials

    exp = Experiment("t", ("mul", "inv"), (100, 200, 300), (10.0, 20.0), ("json", "raw", "ujson"), 4)
    for e in (exp, replace(exp, local=False)):
        assert planned_trials(e) == len(plan_trials(e))
