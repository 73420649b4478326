"""The sweep's quiet lock (`testbed.quiet`): trials share the machine, a validation has it alone, and a
waiting validation is not starved by trials that keep starting."""

from __future__ import annotations

import threading
import time

from testbed.quiet import Quiet
from testbed.sweep.phases import Sweep


def test_trials_share_and_a_validation_waits_for_the_ones_in_flight():
    quiet, log = Quiet(), []
    in_trial, end_trial = threading.Event(), threading.Event()

    def trial():
        with quiet.shared():
            log.append("trial starts")
            in_trial.set()
            end_trial.wait(5)
            log.append("trial ends")

    def validation():
        with quiet.alone():
            log.append("validation")

    first = threading.Thread(target=trial)
    first.start()
    in_trial.wait(5)
    with quiet.shared():  # a second trial beside the first: shared
        log.append("second trial")
    waiting = threading.Thread(target=validation)
    waiting.start()
    time.sleep(0.1)
    assert "validation" not in log  # the first trial is still in flight
    late = threading.Thread(target=trial)  # a trial that starts while the validation waits
    late.start()
    time.sleep(0.1)
    assert log.count("trial starts") == 1  # it waits behind the validation
    end_trial.set()
    for t in (first, waiting, late):
        t.join(5)
    assert log == ["trial starts", "second trial", "trial ends", "validation", "trial starts", "trial ends"]


def test_validations_have_the_machine_one_at_a_time():
    quiet, inside, most = Quiet(), [0], [0]

    def validation():
        with quiet.alone():
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            time.sleep(0.02)
            inside[0] -= 1

    threads = [threading.Thread(target=validation) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert most[0] == 1


def test_only_embedded_testbeds_of_one_sweep_share_a_quiet_lock(two_testbeds, tmp_path):
    from tests.fakes import FAKE_SWEEP

    sweep = Sweep(two_testbeds, FAKE_SWEEP, tmp_path / "run", manifest=None)
    a, b = sweep.testbeds
    assert a.quiet is b.quiet and isinstance(a.quiet, Quiet)
    alone = Sweep(two_testbeds[:1], FAKE_SWEEP, tmp_path / "run", manifest=None)
    assert not isinstance(alone.testbeds[0].quiet, Quiet)


def test_no_testbed_transfers_while_another_runs_its_local_baseline(two_testbeds, tmp_path):
    """The local baseline's scaled time multiplies milliseconds of host CPU by hundreds: no other
    testbed's trial may run beside a unit of it."""
    from testbed.sweep.bookkeeping import start_run
    from testbed.sweep.phases import run_sweep
    from tests.fakes import FAKE_SWEEP

    running, beside, lock = [0], [], threading.Lock()

    def worker(spec):
        if spec["method"] == "local" and spec["trial"] >= 0:
            with lock:
                running[0] += 1
            time.sleep(0.3 if spec["trial"] % 2 == 0 else 0.01)  # rep 0 (even ids): the longer unit
            with lock:
                running[0] -= 1
        elif running[0]:
            beside.append(spec["trial"])
        return {"trial": spec["trial"], "ok": True, "t_total": 1.0, "started_at": "now"}

    for lab in two_testbeds:
        lab.hosts["client"].worker(worker)
    run_dir = tmp_path / "run"
    run_sweep(
        two_testbeds, FAKE_SWEEP, run_dir, start_run(run_dir, "fake-local", FAKE_SWEEP, two_testbeds[0])
    )
    assert beside == []
