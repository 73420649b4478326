"""The run's files as a typed, versioned contract (contracts/run.py): what is written is what the schema
knows, older runs still load, newer ones are refused in one line, and one reader serves everyone."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from analysis import analyze
from analysis.stopping import Rule
from contracts.errors import UserError
from contracts.run import (
    COLUMNS,
    FORMAT_VERSION,
    TRIALS_MARK,
    Manifest,
    TrialRecord,
    TrialWriter,
    read_manifest,
    read_trials,
    write_manifest,
)
from contracts.stage_times import STAGE_TIMES, StageTimes
from contracts.stages import STAGES
from contracts.tasks import TASK_COLUMNS, TaskRecord
from contracts.worker_api import TrialResult, TrialSpec
from testbed.sweep.bookkeeping import trial_row
from testbed.sweep.plan import plan_trials
from testbed.sweep.rounds import Rounds

V1 = Path(__file__).resolve().parents[1] / "data" / "runs" / "v1-tiny"
RUNS = V1.parent  # v2-tiny, v3-tiny: the same run in formats 2 and 3


@pytest.fixture
def v1_run(tmp_path) -> Path:
    """A copy of the stored version-1 run (the analysis writes into the run directory)."""
    run = tmp_path / "v1-tiny"
    run.mkdir()
    for name in ("trials.csv", "manifest.json"):
        shutil.copy(V1 / name, run / name)
    return run


@pytest.fixture(params=["v2-tiny", "v3-tiny"])
def older_run(request, tmp_path) -> tuple[Path, int]:
    """A copy of the v1 run as formats 2 and 3 wrote it (before t_server_start and server stacks)."""
    run = tmp_path / request.param
    run.mkdir()
    for name in ("trials.csv", "manifest.json"):
        shutil.copy(RUNS / request.param / name, run / name)
    return run, int(request.param[1])


def test_a_field_the_worker_emits_that_the_schema_lacks_raises():
    t = plan_trials(read_manifest(V1 / "manifest.json").experiment)[0]
    record = {"ok": True, "t_total": 0.5, "t_server_compute_gpu": 0.1}  # renamed or added by the worker
    with pytest.raises(TypeError, match="t_server_compute_gpu"):
        trial_row("r", t, TrialResult.from_json(record))


def test_a_manifest_section_field_the_schema_lacks_raises(tmp_path):
    manifest = read_manifest(V1 / "manifest.json")
    with pytest.raises(AttributeError):
        manifest.server_url = "http://x"  # slots: no key the schema does not have


def test_the_stored_v1_run_loads_and_its_analysis_is_unchanged(v1_run):
    trials = read_trials(v1_run / "trials.csv")
    assert trials.version == 1 and len(trials.records) == 42
    manifest = read_manifest(v1_run / "manifest.json")
    assert manifest.format_version == 1  # as read; saved again, it is this version's
    assert manifest.device is not None and manifest.device.calibrations
    assert {c.rate_mbps for c in manifest.validation} == {20.0, 100.0}
    out = analyze(v1_run, plots=False, out=open("/dev/null", "w"))
    for expected in sorted((V1 / "expected").glob("*.csv")):
        pd.testing.assert_frame_equal(
            pd.read_csv(out / expected.name), pd.read_csv(expected), check_exact=False, rtol=1e-9
        )


def test_stored_v2_and_v3_runs_load_without_server_start_and_their_analysis_is_unchanged(older_run):
    """Formats 2 and 3 had no t_server_start column and no server stacks: empty, and wsgi."""
    run, version = older_run
    trials = read_trials(run / "trials.csv")
    assert trials.version == version and len(trials.records) == 42
    assert all(r.t_server_start is None for r in trials.records)
    assert trials.records == read_trials(V1 / "trials.csv").records
    manifest = read_manifest(run / "manifest.json")
    assert manifest.format_version == version and manifest.experiment.server_stack == "wsgi"
    out = analyze(run, plots=False, out=open("/dev/null", "w"))
    for expected in sorted((V1 / "expected").glob("*.csv")):
        pd.testing.assert_frame_equal(
            pd.read_csv(out / expected.name), pd.read_csv(expected), check_exact=False, rtol=1e-9
        )


def test_resuming_an_older_run_upgrades_its_trials_to_this_version_before_appending(older_run):
    path = older_run[0] / "trials.csv"
    before = read_trials(path).records
    writer = TrialWriter(path)
    row = TrialRecord("mul", 200, "raw", True, run_id="r", trial=99, rate_mbps=20.0, t_total=1.0)
    writer.write(replace(row, t_server_start=0.25))
    writer.close()
    text = path.read_text()
    assert text.startswith(f"{TRIALS_MARK}{FORMAT_VERSION}\n") and "t_server_start" in text.splitlines()[1]
    after = read_trials(path)
    assert after.version == FORMAT_VERSION == 14 and after.records[:-1] == before
    assert after.records[-1].t_server_start == 0.25


def test_what_the_sweep_writes_now_is_this_version_and_reads_back_the_same(tmp_path):
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


def test_trials_and_tasks_hold_the_stage_columns_of_one_definition():
    """`contracts.stage_times` defines them once (the stages of `contracts.stages`); trials.csv and a
    stream's tasks.csv each hold them in one block, after their own leading columns, as before."""
    assert ("t_total", *STAGES) == STAGE_TIMES
    assert issubclass(TrialRecord, StageTimes) and issubclass(TaskRecord, StageTimes)
    for columns in (COLUMNS, TASK_COLUMNS):
        start = columns.index("error") + 1  # each record's leading columns end with its error
        assert columns[start : start + len(STAGE_TIMES)] == STAGE_TIMES


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


def test_a_run_older_than_the_connection_policy_reads_as_persistent_and_a_new_one_as_written(tmp_path):
    """Before version 3 the gRPC client kept one channel and HTTP kept its connection: persistent."""
    assert read_manifest(V1 / "manifest.json").experiment.connection == "persistent"
    manifest = read_manifest(V1 / "manifest.json")
    write_manifest(tmp_path / "manifest.json", manifest)
    assert read_manifest(tmp_path / "manifest.json").experiment.connection == "persistent"
    data = json.loads((tmp_path / "manifest.json").read_text())
    data["experiment"]["connection"] = "per-trial"
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    assert read_manifest(tmp_path / "manifest.json").experiment.connection == "per-trial"


def test_resuming_a_v1_run_upgrades_its_trials_before_appending(v1_run):
    """The v1 header's column order is not this version's: appending under it would shift every cell."""
    path = v1_run / "trials.csv"
    before = read_trials(path).records
    writer = TrialWriter(path)  # what a resumed sweep opens
    writer.write(TrialRecord("mul", 200, "raw", False, run_id="r", trial=99, rate_mbps=20.0, error="late"))
    writer.close()
    after = read_trials(path)
    assert after.version == FORMAT_VERSION and after.records == [*before, after.records[-1]]
    assert after.records[-1].trial == 99 and after.records[-1].error == "late"


def test_resuming_a_file_with_columns_the_sweep_never_writes_is_refused(v1_run):
    path = v1_run / "trials.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0] + ",notes", *(line + ",x" for line in lines[1:])]) + "\n")
    assert len(read_trials(path).records) == 42  # version 1: read, the notes column left aside
    with pytest.raises(UserError, match="notes"):
        TrialWriter(path)


def test_a_version_2_file_with_a_column_it_does_not_have_is_refused(tmp_path):
    path = tmp_path / "trials.csv"
    writer = TrialWriter(path)
    writer.write(TrialRecord("mul", 200, "raw", True, trial=0, rate_mbps=20.0, t_total=1.0))
    writer.close()
    mark, header, row = path.read_text().splitlines()
    path.write_text(f"{mark}\n{header},gpu\n{row},1\n")
    with pytest.raises(UserError, match="gpu"):
        read_trials(path)


@pytest.mark.parametrize(
    "fields, why",
    [
        ({"ok": True}, "t_total is empty"),
        ({"ok": True, "t_total": -1.0}, "negative"),
        ({"ok": False, "rate_mbps": None}, "positive rate"),
        ({"ok": False, "method": ""}, "method is empty"),
    ],
)
def test_a_record_no_reader_would_accept_cannot_be_made(fields, why):
    """The sweep cannot write a row its own reader refuses: the checks live in the record."""
    base = {"op": "mul", "size": 200, "method": "raw", "rate_mbps": 20.0}
    with pytest.raises(ValueError, match=why):
        TrialRecord(**{**base, **fields})


def test_what_the_real_worker_reports_is_a_row_the_schema_knows():
    """The trial worker's own answers (a local trial, and a remote one whose server is not there) become
    rows without a field the schema lacks."""
    from client.worker import TrialWorker

    exp = read_manifest(V1 / "manifest.json").experiment
    trials = [t for t in plan_trials(exp) if t.size == 200]
    local = next(t for t in trials if t.method == "local")
    remote = next(t for t in trials if t.method == "raw")
    worker = TrialWorker("http://127.0.0.1:9/", seed=1, timeout=2.0)
    for t in (local, remote):
        spec = TrialSpec(trial=t.trial, op=t.op, size=t.size, dtype=t.dtype, method=t.method)
        row = trial_row("r", t, worker.run(spec))
        assert row.ok == (t is local), row.error
