"""The trial worker's boundary typed (`contracts.worker_api`): the JSON on the wire is what the two ends
exchanged before the types, and a key one end does not know is a bug where it is read."""

from __future__ import annotations

import io
import json
from dataclasses import fields

import pytest

from client import worker as worker_main
from contracts.run import COLUMNS, TrialRecord
from contracts.stages import LOCAL
from contracts.worker_api import TrialResult, TrialSpec
from testbed.experiment import Experiment
from testbed.sweep.bookkeeping import trial_row
from testbed.sweep.plan import Trial
from testbed.sweep.worker_link import WorkerLink

EXP = Experiment("w", ("mul",), (8,), (10.0,), ("raw",), 1, trial_timeout=5.0)


def test_a_spec_is_the_eight_keys_the_link_always_sent():
    spec = TrialSpec(trial=3, op="mul", size=400, dtype="float64", method="raw", server="")
    assert spec.to_json() == {
        "trial": 3, "op": "mul", "size": 400, "dtype": "float64", "method": "raw",
        "server": "", "parallelism": None, "io_kb": None,
    }  # fmt: skip
    assert TrialSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


@pytest.mark.parametrize(
    "change, named",
    [({"bogus": 1}, "bogus"), ({"size": "400"}, "int"), ({"trial": True}, "int")],
)
def test_a_spec_the_worker_does_not_know_is_a_type_error(change, named):
    data = {"trial": 1, "op": "mul", "size": 400, "dtype": "float64", "method": "raw", **change}
    with pytest.raises(TypeError, match=named):
        TrialSpec.from_json(data)


def test_a_result_carries_only_what_the_trial_has_and_refuses_an_unknown_key():
    result = TrialResult(trial=2, ok=False, error="ConnectionRefusedError: no server")
    assert result.to_json() == {"trial": 2, "ok": False, "error": "ConnectionRefusedError: no server"}
    ok = {"trial": 1, "ok": True, "t_total": 1, "cpu_client_encode": 0.0, "bytes_up": 640}
    assert TrialResult.from_json(ok).to_json() == ok  # an int time reads as a number; 0.0 is kept
    with pytest.raises(TypeError, match="emulation_flagged"):  # the sweep's to add, not the worker's
        TrialResult.from_json({**ok, "emulation_flagged": True})
    with pytest.raises(TypeError, match="ok"):
        TrialResult.from_json({"trial": 1})


def test_every_field_of_a_result_is_a_column_of_trials_csv():
    assert {f.name for f in fields(TrialResult)} <= set(COLUMNS)
    t = Trial(5, "mul", 8, "float64", None, LOCAL, 0)
    row = trial_row("r", t, TrialResult(trial=5, ok=True, t_total=0.5, cpu_total=0.4))
    assert isinstance(row, TrialRecord) and (row.t_total, row.cpu_total) == (0.5, 0.4)


def test_the_worker_process_answers_a_result_and_stops_at_a_spec_it_does_not_know(monkeypatch, capsys):
    local = {"trial": 0, "op": "mul", "size": 8, "dtype": "float64", "method": LOCAL}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(local) + "\n"))
    assert worker_main.main(["--url", "http://127.0.0.1:9"]) == 0
    ready, answer = capsys.readouterr().out.splitlines()
    assert json.loads(ready) == {"ready": True}
    result = TrialResult.from_json(json.loads(answer))
    assert result.ok and result.trial == 0 and result.t_total > 0 and result.connection is None

    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**local, "seed": 2}) + "\n"))
    with pytest.raises(TypeError, match="seed"):  # a bug: the worker exits with its traceback
        worker_main.main(["--url", "http://127.0.0.1:9"])


def test_the_link_sends_a_spec_and_reads_a_result(lab, tmp_path):
    answers = []

    def script(spec):
        answers.append(spec)
        extra = {"bogus": 1} if spec["trial"] == 2 else {}
        return {"trial": spec["trial"], "ok": True, "t_total": 0.25, **extra}

    lab.hosts["client"].worker(script)
    link = WorkerLink(lab, EXP, tmp_path / "worker.log")
    try:
        result = link.run(Trial(1, "mul", 8, "float64", 10.0, "raw", 0, "python", parallelism=2))
        assert result == TrialResult(trial=1, ok=True, t_total=0.25)
        assert answers[0] == TrialSpec(1, "mul", 8, "float64", "raw", "python", 2).to_json()
        with pytest.raises(TypeError, match="bogus"):
            link.run(Trial(2, "mul", 8, "float64", 10.0, "raw", 0, "python"))
    finally:
        link.close()
