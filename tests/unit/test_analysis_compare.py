"""`testbed compare`: runs side by side, on synthetic runs whose differences are made on purpose."""

import csv
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from analysis.compare import compare_runs, summary_lines, write_comparison
from contracts.errors import UserError
from contracts.run import read_manifest, write_manifest
from testbed import cli
from tests.synthetic import write_synthetic_run

GRID = {"sizes": (400, 800), "rates": (10, 100), "reps": 6}


def scale_column(run_dir: Path, column: str, factor: float, method: str | None = None) -> None:
    """Multiply one timing column (and t_total with it) of every ok trial, or of one method's."""
    path = run_dir / "trials.csv"
    with path.open(newline="") as f:
        header = f.readline()  # the format line, kept as it is
        rows = list(csv.DictReader(f))
        fields = list(rows[0])
    for row in rows:
        if row["ok"].lower() != "true" or (method and row["method"] != method) or not row[column]:
            continue
        value = float(row[column])
        row[column] = repr(value * factor)
        if column != "t_total":
            row["t_total"] = repr(float(row["t_total"]) + value * (factor - 1))
    with path.open("w", newline="") as f:
        f.write(header)
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture
def runs(tmp_path):
    return [write_synthetic_run(tmp_path / f"run{seed}", seed=seed, **GRID) for seed in (1, 2)]


def test_runs_of_one_model_agree(runs):
    result = compare_runs(runs)
    d = result.decisions
    assert len(d) == 2 * 2 * 3 and not d["contradict"].any()
    assert list(d.columns[4:6]) == result.labels == ["run1", "run2"]
    # noise of 5% with 6 repetitions: nearly every mean within the other's CI, none far off
    m = result.means
    assert set(m["quantity"]) >= {"completion", "local", "t_comm", "t_server_compute", "t_client_encode"}
    assert m["within"].mean() > 0.8 and (m["diff_pct"].abs() < 15).all()
    assert len(m[m["quantity"] == "local"]) == 2  # one baseline per size, not one per cell


def test_a_slower_stage_is_named(runs):
    scale_column(runs[1], "t_server_compute", 1.5)
    m = compare_runs(runs).means
    compute = m[m["quantity"] == "t_server_compute"]
    assert compute["outside_both"].all() and compute["diff_pct"].between(40, 60).all()
    encode = m[m["quantity"] == "t_client_encode"]
    assert not encode["outside_both"].all()  # the stages left alone still agree
    text = "\n".join(summary_lines(compare_runs(runs)))
    assert "t_server_compute (run2)" in text and "outside both" in text


def test_opposite_decisions_contradict(runs):
    scale_column(runs[1], "t_total", 20.0, method="local")  # a local baseline 20x slower: offloading pays
    result = compare_runs(runs)
    d = result.decisions
    flipped = d[(d["run1"] == "0") & (d["run2"] == "1")]
    assert len(flipped) and flipped["contradict"].all() and not flipped["agree"].any()
    assert "contradict (1 in one run, 0 in another)" in "\n".join(summary_lines(result))


def test_cli_writes_both_tables(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert cli.main(["compare", *map(str, runs), "--out", str(out)]) == 0
    assert "decisions:" in capsys.readouterr().out
    decisions = pd.read_csv(out / "compare_decisions.csv", dtype=str)
    assert set(decisions["agree"]) <= {"True", "False"} and len(decisions) == 12
    assert (out / "compare_means.csv").is_file()


def test_one_run_is_refused(runs, capsys):
    with pytest.raises(UserError, match="at least two runs"):
        compare_runs(runs[:1])
    assert cli.main(["compare", str(runs[0])]) == 2
    assert "at least two runs" in capsys.readouterr().err


def test_two_hypotheses_runs_show_the_papers_scorecard_side_by_side(tmp_path):
    """Issue 45, item 7: the float64 run and the int32 one, each labelled by its operands and text,
    with its held-out score and every statement's verdict in both; a statement judged differently is
    named. Runs of no paper statement have no such table."""
    float_run = write_synthetic_run(
        tmp_path / "float", seed=1, sizes=(400, 500), rates=(10, 20, 40, 60, 80, 100)
    )
    int_run = write_synthetic_run(tmp_path / "int", seed=2, sizes=(400, 500), rates=(10, 20, 40, 60, 80, 100))
    manifest = read_manifest(int_run / "manifest.json")
    experiment = replace(manifest.experiment, dtype="int32", int_range=(0, 10), codec_text="era")
    write_manifest(int_run / "manifest.json", replace(manifest, experiment=experiment))
    scale_column(int_run, "t_comm", 40.0, method="raw")  # RAW's offloading gone in the int32 run
    result = compare_runs([float_run, int_run])
    assert result.hypotheses == {"float": "float64, compact", "int": "int32 0..9, era"}
    assert set(result.scores) == {"float", "int"} and all(
        "of 17 held-out" in s for s in result.scores.values()
    )
    paper = result.paper.set_index("n")
    differ = paper[paper["float"] != paper["int"]]
    assert len(differ) and set(differ["use"]) <= {"held out", "fit", "the paper's anomaly"}
    assert (paper.loc[14:17, ["float", "int"]] == "not measured").all().all()  # no 800 or 1200 here
    text = "\n".join(summary_lines(result))
    assert "int (int32 0..9, era): " in text and result.scores["int"] in text
    first = differ.index[0]
    assert f"  {first} ({differ.loc[first, 'use']}): {differ.loc[first, 'float']} / " in text
    out = tmp_path / "out"
    assert (out / "compare_paper_checks.csv") in write_comparison(result, out)
    small = [write_synthetic_run(tmp_path / f"log{i}", ops=("log",), sizes=(16,), rates=(5,)) for i in (1, 2)]
    assert compare_runs(small).paper is None
