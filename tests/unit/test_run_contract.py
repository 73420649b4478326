"""The run's files as a typed, versioned contract (contracts/run.py): what is written is what the schema
knows, older runs still load, newer ones are refused in one line, and one reader serves everyone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis import analyze
from analysis.stopping import Rule
from contracts.errors import UserError
from contracts.run import (
    FORMAT_VERSION,
    TRIALS_MARK,
    Manifest,
    TrialRecord,
    TrialWriter,
    read_manifest,
    read_trials,
    write_manifest,
)
from contracts.trials import STAGES
from testbed.bookkeeping import trial_row
from testbed.plan import plan_trials
from testbed.rounds import Rounds

V1 = Path(__file__).resolve().parents[1] / "data" / "runs" / "v1-tiny"


@pytest.fixture
def v1_run(tmp_path) -> Path:
    """A copy of the stored version-1 run (the analysis writes into the run directory)."""
    run = tmp_path / "v1-tiny"
    run.mkdir()
    for name in ("trials.csv", "manifest.json"):
        shutil.copy(V1 / name, run / name)
    return run


def test_a_field_the_worker_emits_that_the_schema_lacks_raises():
    t = plan_trials(read_manifest(V1 / "manifest.json").experiment)[0]
    record = {"ok": True, "t_total": 0.5, "t_server_compute_gpu": 0.1}  # renamed or added by the worker
    with pytest.raises(TypeError, match="t_server_compute_gpu"):
        trial_row("r", t, record)


def test_a_manifest_section_field_the_schema_lacks_raises(tmp_path):
    manifest = read_manifest(V1 / "manifest.json")
    with pytest.raises(AttributeError):
        manifest.server_url = "http://x"  # slots: no key the schema does not have


def test_the_stored_v1_run_loads_and_its_analysis_is_unchanged(v1_run):
    trials = read_trials(v1_run / "trials.csv")
    assert trials.version == 1 and len(trials.records) == 42
    manifest = read_manifest(v1_run / "manifest.json")
    assert manifest.format_version == FORMAT_VERSION  # converted on load
    assert manifest.device is not None and manifest.device.calibrations
    assert {c.rate_mbps for c in manifest.validation} == {20.0, 100.0}
    out = analyze(v1_run, plots=False, out=open("/dev/null", "w"))
    for expected in sorted((V1 / "expected").glob("*.csv")):
        pd.testing.assert_frame_equal(
            pd.read_csv(out / expected.name), pd.read_csv(expected), check_exact=False, rtol=1e-9
        )


def test_what_the_sweep_writes_now_is_version_2_and_reads_back_the_same(tmp_path):
    records = read_trials(V1 / "trials.csv").records
    writer = TrialWriter(tmp_path / "trials.csv")
    for r in records:
        writer.write(r)
    writer.close()
    assert (tmp_path / "trials.csv").read_text().startswith(f"{TRIALS_MARK}{FORMAT_VERSION}\n")
    again = read_trials(tmp_path / "trials.csv")
    assert again.version == FORMAT_VERSION and again.records == records
    manifest = read_manifest(V1 / "manifest.json")
    write_manifest(tmp_path / "manifest.json", manifest)
    assert json.loads((tmp_path / "manifest.json").read_text())["format_version"] == FORMAT_VERSION
    assert read_manifest(tmp_path / "manifest.json") == manifest


def test_files_of_a_newer_version_are_refused_naming_both_versions(tmp_path):
    newer = FORMAT_VERSION + 1
    (tmp_path / "trials.csv").write_text(f"{TRIALS_MARK}{newer}\n" + (V1 / "trials.csv").read_text())
    with pytest.raises(
        UserError, match=f"format version {newer}; this testbed reads versions 1 to {FORMAT_VERSION}"
    ):
        read_trials(tmp_path / "trials.csv")
    data = json.loads((V1 / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**data, "format_version": newer}))
    with pytest.raises(
        UserError, match=f"format version {newer}; this testbed reads versions 1 to {FORMAT_VERSION}"
    ):
        read_manifest(tmp_path / "manifest.json")


def test_a_manifest_with_a_key_no_version_has_is_refused(tmp_path):
    data = json.loads((V1 / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**data, "server_url": "http://x"}))
    with pytest.raises(UserError, match="unknown key"):
        read_manifest(tmp_path / "manifest.json")


def test_resume_the_rule_and_the_analysis_read_one_and_the_same_outcomes(v1_run):
    """One reader: what resume counts as done and what the stopping rule sees come from the same rows."""
    trials = read_trials(v1_run / "trials.csv")
    outcomes = trials.outcomes()
    assert set(outcomes) == set(range(42)) and all(v is not None for v in outcomes.values())
    manifest = read_manifest(v1_run / "manifest.json")
    exp = manifest.experiment
    rounds = Rounds(exp, plan_trials(exp), outcomes)
    assert rounds.rule == Rule.of(exp) == Rule(3, 3, None)
    frame = pd.DataFrame([r.__dict__ for r in trials.records])
    assert frame.loc[frame["ok"], "t_total"].round(12).tolist() == [
        round(outcomes[t], 12) for t in frame.loc[frame["ok"], "trial"]
    ]


def test_ok_is_read_one_way_everywhere(tmp_path):
    """`TRUE`, `1` and `yes` are successes for resume as for the analysis (they once differed)."""
    header = "run_id,trial,op,size,rate_mbps,method,ok,t_total," + ",".join(STAGES)
    body = "".join(
        f"r,{i},mul,100,10,raw,{ok},1.0,,,,,,\n" for i, ok in enumerate(("true", "TRUE", "1", "yes"))
    )
    (tmp_path / "trials.csv").write_text(header + "\n" + body)
    assert read_trials(tmp_path / "trials.csv").outcomes() == {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}


def test_a_manifest_is_typed_through_and_through():
    manifest = read_manifest(V1 / "manifest.json")
    assert isinstance(manifest, Manifest)
    assert manifest.experiment.methods == ("json", "raw", "grpc") and manifest.experiment.reps == 3
    assert all(s.status for s in manifest.sessions)
    assert TrialRecord.__dataclass_params__.frozen
