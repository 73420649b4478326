"""A transfer sweep's experiment and plan: `datasets:` makes the op fetch, each dataset's size its
files, no local baseline; concurrency is a setting of one fetch (no request streams); every dataset x
setting is a cell; the spec carries the fetch's concurrency and dataset, an offload's spec does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.datasets import DATASETS
from contracts.errors import UserError
from testbed.experiment import load_experiment, planned_trials
from testbed.overrides import override
from testbed.sweep.plan import plan_trials
from tests.helpers import write_experiment

STUDY = Path(__file__).resolve().parents[2] / "experiments" / "transfer-study.yaml"


def test_the_shipped_study_plans_a_fetch_per_dataset_and_setting():
    exp = load_experiment(STUDY)
    assert exp.ops == ("fetch",) and exp.methods == ("http",) and not exp.local and not exp.together
    assert sorted(exp.sizes) == sorted(DATASETS[d].files for d in exp.datasets)
    trials = plan_trials(exp)
    settings = len(exp.concurrency) * len(exp.parallelism) * len(exp.io_kb)
    assert len(trials) == planned_trials(exp) == len(exp.datasets) * settings * exp.reps
    assert {t.dataset for t in trials} == set(exp.datasets) and all(t.stream is None for t in trials)
    assert all(DATASETS[t.dataset].files == t.size for t in trials)
    assert len({t.cell for t in trials}) == len(exp.datasets) * settings


def test_one_delays_line_is_all_the_rtt_needs(tmp_path):
    """The study's file with its commented `delays:` line (issue 48 item 3) taken in: a fetch per
    dataset, setting and RTT, each row's delay its own; nothing else changes."""
    text = STUDY.read_text()
    (line,) = [x for x in text.splitlines() if x.startswith("#   delays: [")]
    path = tmp_path / "study.yaml"
    path.write_text(text + line.removeprefix("#   ") + "\n")
    exp, plain = load_experiment(path), load_experiment(STUDY)
    assert len(exp.delays_ms) == 3 and planned_trials(exp) == 3 * planned_trials(plain)
    trials = plan_trials(exp)
    assert {t.delay_ms for t in trials} == set(exp.delays_ms) and all(t.dataset for t in trials)
    assert len({t.cell for t in trials}) == 3 * len({t.cell for t in plan_trials(plain)})


@pytest.mark.parametrize(
    "text, key",
    [
        ("datasets: [html, audio]\nrates: [20]\nreps: 1\n", "datasets"),
        ("datasets: [html]\nops: [mul]\nrates: [20]\nreps: 1\n", "ops"),
        ("datasets: [html]\nsizes: [48]\nrates: [20]\nreps: 1\n", "sizes"),
        ("datasets: html\nrates: [20]\nreps: 1\n", "datasets"),
    ],
)
def test_a_bad_transfer_file_is_refused_naming_its_key(tmp_path, text, key):
    with pytest.raises(UserError, match=f"'{key}'"):
        load_experiment(write_experiment(tmp_path, text))


def test_the_fetch_op_needs_datasets(tmp_path):
    exp = load_experiment(
        write_experiment(tmp_path, "ops: [mul]\nsizes: [8]\nrates: [20]\nmethods: [raw]\nreps: 1\n")
    )
    with pytest.raises(UserError, match="transfer sweep"):
        override(exp, {"ops": "fetch", "methods": "http"})


def test_a_fetch_spec_carries_its_settings_and_an_offload_spec_does_not():
    from contracts.worker_api import TrialSpec

    exp = load_experiment(STUDY)
    t = next(t for t in plan_trials(exp) if t.concurrency == 4 and t.dataset == "image")
    spec = TrialSpec(trial=t.trial, op=t.op, size=t.size, dtype=t.dtype, method=t.method,
                     concurrency=t.concurrency, dataset=t.dataset)  # fmt: skip
    assert spec.to_json()["dataset"] == "image" and spec.to_json()["concurrency"] == 4
    plain = TrialSpec(trial=1, op="mul", size=8, dtype="float64", method="raw")
    assert "dataset" not in plain.to_json() and "concurrency" not in plain.to_json()
