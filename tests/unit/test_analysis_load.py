"""Reading trials.csv: what is accepted, and one clear UserError for each thing a user can get wrong."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import analyze
from analysis.load import load_run, trials_frame
from contracts.errors import UserError
from contracts.run import REQUIRED

HEADER = (
    "run_id,trial,op,size,dtype,rate_mbps,method,rep,ok,error,t_total,t_client_encode,t_comm,"
    "t_server_decode,t_server_compute,t_server_encode,t_client_decode,bytes_up,bytes_down,started_at"
)
LOCAL_ROW = "r,0,mul,400,float64,,local,0,true,,2.0,,,,,,,,,2026-01-01"
REMOTE_ROW = "r,1,mul,400,float64,10,json,0,true,,3.0,0.1,2.0,0.1,0.5,0.1,0.2,100,50,2026-01-01"
FAILED_ROW = "r,2,mul,400,float64,10,json,1,false,HTTP 500,,,,,,,,,,2026-01-01"


def write(tmp_path: Path, *lines: str) -> Path:
    (tmp_path / "trials.csv").write_text("\n".join(lines) + "\n")
    return tmp_path


def error(tmp_path: Path) -> UserError:
    with pytest.raises(UserError) as info:
        load_run(tmp_path)
    assert "\n" not in str(info.value)  # printed as one line
    return info.value


def test_a_minimal_run_loads(tmp_path):
    run = load_run(write(tmp_path, HEADER, LOCAL_ROW, REMOTE_ROW, FAILED_ROW))
    t = run.trials
    assert list(t["method"]) == ["local", "json", "json"]
    assert list(t["ok"]) == [True, True, False]
    assert t["rate_mbps"].isna().tolist() == [True, False, False]
    assert t.loc[1, "t_comm"] == 2.0 and t.loc[1, "line"] == 3
    assert run.manifest is None


def test_columns_in_any_order_with_extras_and_a_bom(tmp_path):
    columns = HEADER.split(",")
    order = list(reversed(columns)) + ["comment"]
    rows = [dict(zip(columns, line.split(","), strict=True)) for line in (LOCAL_ROW, REMOTE_ROW)]
    lines = [",".join(order)] + [",".join(r.get(c, "whatever") for c in order) for r in rows]
    path = tmp_path / "trials.csv"
    path.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    t = trials_frame(path)
    assert t["t_total"].tolist() == [2.0, 3.0]


def test_only_the_needed_columns_are_required(tmp_path):
    write(tmp_path, ",".join(REQUIRED), "mul,400,,local,1,2.0,,,,,,", "mul,400,10,raw,0,,,,,,,")
    t = load_run(tmp_path).trials
    assert t["ok"].tolist() == [True, False]


@pytest.mark.parametrize("text", ["true", "True", "TRUE", "1", "yes"])
def test_ok_spellings_for_true(tmp_path, text):
    t = load_run(write(tmp_path, HEADER, REMOTE_ROW.replace(",true,", f",{text},"))).trials
    assert t["ok"].tolist() == [True]


@pytest.mark.parametrize("text", ["false", "False", "FALSE", "0", "no"])
def test_ok_spellings_for_false(tmp_path, text):
    t = load_run(write(tmp_path, HEADER, REMOTE_ROW, FAILED_ROW.replace(",false,", f",{text},"))).trials
    assert t["ok"].tolist() == [True, False]


def test_missing_run_dir(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_run(tmp_path / "nope")


def test_missing_trials_csv(tmp_path):
    assert "trials.csv does not exist" in str(error(tmp_path))


def test_empty_file(tmp_path):
    (tmp_path / "trials.csv").write_text("")
    assert "is empty" in str(error(tmp_path))


def test_header_only(tmp_path):
    assert "has no trials" in str(error(write(tmp_path, HEADER)))


def test_only_failures(tmp_path):
    e = error(write(tmp_path, HEADER, FAILED_ROW, FAILED_ROW.replace(",1,false", ",2,false")))
    assert "all 2 trials failed" in str(e) and "HTTP 500" in str(e)


def test_only_local_trials(tmp_path):
    assert "only local trials" in str(error(write(tmp_path, HEADER, LOCAL_ROW)))


def test_missing_columns_are_all_named(tmp_path):
    header = HEADER.replace(",t_comm", "").replace("t_total,", "")
    e = error(write(tmp_path, header))
    assert "lacks column(s) t_total, t_comm" in str(e)
    assert e.fix


def test_non_numeric_time_names_column_and_line(tmp_path):
    bad = REMOTE_ROW.replace(",2.0,0.1,", ",2.0s,0.1,")
    e = error(write(tmp_path, HEADER, LOCAL_ROW, REMOTE_ROW, bad))
    assert "line 4: t_comm is '2.0s', not a time in seconds" in str(e)


def test_ok_row_without_total(tmp_path):
    bad = REMOTE_ROW.replace(",true,,3.0,", ",true,,,")
    assert "line 2: t_total is empty in a successful trial" in str(error(write(tmp_path, HEADER, bad)))


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_total_must_be_a_finite_non_negative_number(tmp_path, value):
    bad = REMOTE_ROW.replace(",true,,3.0,", f",true,,{value},")
    assert "line 2: t_total" in str(error(write(tmp_path, HEADER, bad)))


def test_failed_rows_may_hold_anything_in_times(tmp_path):
    junk = FAILED_ROW.replace(",HTTP 500,,", ",HTTP 500,n/a,")
    t = load_run(write(tmp_path, HEADER, LOCAL_ROW, REMOTE_ROW, junk)).trials
    assert t["t_total"].isna().tolist() == [False, False, True]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (REMOTE_ROW.replace(",true,", ",maybe,"), "line 2: ok is 'maybe'"),
        (REMOTE_ROW.replace(",10,json,", ",,json,"), "line 2: rate_mbps is empty"),
        (REMOTE_ROW.replace(",10,json,", ",fast,json,"), "line 2: rate_mbps is 'fast'"),
        (REMOTE_ROW.replace(",400,", ",big,"), "line 2: size is 'big'"),
        (REMOTE_ROW.replace(",json,", ",,"), "line 2: method is empty"),
    ],
)
def test_bad_values(tmp_path, row, message):
    assert message in str(error(write(tmp_path, HEADER, row)))


def test_mixed_dtypes_are_refused(tmp_path):
    other = REMOTE_ROW.replace("float64", "int32")
    assert "mixes dtypes float64, int32" in str(error(write(tmp_path, HEADER, LOCAL_ROW, REMOTE_ROW, other)))


def test_broken_manifest(tmp_path):
    write(tmp_path, HEADER, LOCAL_ROW, REMOTE_ROW)
    (tmp_path / "manifest.json").write_text("{not json")
    assert "manifest.json is not valid JSON" in str(error(tmp_path))


def test_manifest_is_read(tmp_path):
    write(tmp_path, HEADER, LOCAL_ROW, REMOTE_ROW)
    experiment = {
        "name": "x",
        "ops": ["mul"],
        "sizes": [400],
        "rates_mbps": [10.0],
        "methods": ["json"],
        "reps": 3,
    }
    (tmp_path / "manifest.json").write_text(
        json.dumps({"run_id": "x", "status": "complete", "experiment": experiment})
    )
    manifest = load_run(tmp_path).manifest
    assert (manifest.run_id, manifest.experiment.sizes, manifest.format_version) == ("x", (400,), 1)


def test_a_manifest_that_is_not_a_runs_is_refused_in_one_line(tmp_path):
    write(tmp_path, HEADER, LOCAL_ROW, REMOTE_ROW)
    (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "x"}))
    assert "manifest.json does not hold a run's manifest" in str(error(tmp_path))


def test_planned_cells_from_the_manifest_show_as_missing(tmp_path, capsys):
    write(tmp_path, HEADER, LOCAL_ROW, REMOTE_ROW)
    experiment = {
        "name": "p",
        "ops": ["mul"],
        "sizes": [400],
        "rates_mbps": [10.0, 20.0],
        "methods": ["json", "raw"],
    }
    manifest = {"run_id": "planned", "status": "complete", "experiment": {**experiment, "reps": 2}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    analyze(tmp_path, plots=False)
    # one trial on each side of the json cell at 10 Mbit/s: known, but too few to test, so undecided
    assert (
        "mul 400: json ? - (0/2, 1 undecided, 1 missing)  raw - - (0/2, 2 missing)" in capsys.readouterr().out
    )


def test_module_cli_prints_one_line_and_exits_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "analysis", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parent.parent.parent,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("analysis: error: run directory") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
