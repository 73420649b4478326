"""Cells the emulation's error could flip (`analysis.emulation_error`, issue 44 item 3): on trials whose
every stage is the device profile's target plus an error chosen by hand, so each cell's emulation error
and its decision margin are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.cells import cell_table
from analysis.compare import Comparison, compare_decisions, summary_lines
from analysis.decisions import decision_vectors
from analysis.emulation_error import could_flip
from analysis.summary import summary_text
from contracts.device import DeviceProfile, SpeedCurve
from contracts.run import Device, read_manifest
from contracts.tolerance import DEFAULT
from tests.synthetic import write_synthetic_run

# mul 100 on the client: 2e6 flop at 0.1 GFLOP/s = 20 ms locally; raw at 100 / 200 MB/s
CLIENT = DeviceProfile(
    "slow", {"mul": SpeedCurve(((100, 0.1),))}, {"raw": {"encode": 100.0, "decode": 200.0}}
)
SERVER = DeviceProfile("srv", {"mul": SpeedCurve(((100, 2.0),))}, {"raw": {"encode": 400.0, "decode": 400.0}})
DATA = 100 * 100 * 8  # one float64 matrix of 100 x 100
TARGETS = {  # each remote stage's target (s): operands are two matrices, the result one
    "t_client_encode": 2 * DATA / 100e6,  # 1.6 ms
    "t_server_decode": 2 * DATA / 400e6,  # 0.4 ms
    "t_server_compute": 0.001,
    "t_server_encode": DATA / 400e6,  # 0.2 ms
    "t_client_decode": DATA / 200e6,  # 0.4 ms
}
LOCAL = 0.020
REPS = 6
NOISE = 20e-6  # each time +-20 us, alternating: every mean known, every CI narrow


@pytest.fixture
def manifest(tmp_path):
    run = write_synthetic_run(tmp_path / "run", sizes=(100,), rates=(10,), methods=("raw",), reps=REPS)
    m = read_manifest(run / "manifest.json")
    m.device, m.server_device = Device(CLIENT.as_dict(), "scaled"), Device(SERVER.as_dict(), "scaled")
    return m


def trials(comm: float, errors: dict[str, float], local_error: float = 0.0) -> pd.DataFrame:
    """One remote cell (mul 100, raw, 10 Mbit/s) whose stages are their targets plus `errors` (s), its
    communication `comm`, and the local baseline at its target plus `local_error`."""
    sign = [(-1) ** rep for rep in range(REPS)]
    rows = [
        {"op": "mul", "size": 100, "method": "local", "rep": rep, "ok": True, "t_total": LOCAL + local_error + s * NOISE}
        for rep, s in enumerate(sign)
    ]  # fmt: skip
    for rep, s in enumerate(sign):
        stages = {c: t + errors.get(c, 0.0) + s * NOISE for c, t in TARGETS.items()}
        stages["t_comm"] = comm + s * NOISE
        row = {"op": "mul", "size": 100, "rate_mbps": 10.0, "method": "raw", "rep": rep, "ok": True}
        rows.append({**row, **stages, "t_total": sum(stages.values())})
    frame = pd.DataFrame(rows)
    frame.insert(0, "line", range(2, len(frame) + 2))  # as trials.csv numbers its rows
    return frame


def one_cell(frame: pd.DataFrame, manifest) -> pd.DataFrame:
    cells = cell_table(frame, manifest)
    assert len(cells) == 1
    return cells


def test_a_margin_smaller_than_the_emulations_error_is_marked_uncertain(manifest):
    # remote 20 ms - 0.3 ms: offloading pays, significantly; but the client's encode ran 0.5 ms short of
    # the device's, so the device's difference is about +0.2 ms: the decision could flip
    comm = LOCAL - sum(TARGETS.values()) - 0.0003 + 0.0005
    cells = one_cell(trials(comm, {"t_client_encode": -0.0005}), manifest)
    cell = cells.iloc[0]
    assert cell["significant"] and cell["offload"] == 1
    assert cell["penalty"] == pytest.approx(-0.0003, abs=1e-9)
    assert abs(cell["penalty"]) - cell["diff_ci95"] < 0.0005  # the margin: smaller than the error
    assert cell["emulation_error"] == pytest.approx(-0.0005, abs=1e-9)
    assert 0 < cell["emulation_error_ci95"] < 1e-4
    assert bool(cell["emulation_uncertain"])
    vector = decision_vectors(cells).iloc[0]
    assert vector["vector"] == "1~"
    assert (vector["offload_count"], vector["uncertain_rates"]) == (1, 1)


def test_a_wide_margin_with_a_missed_short_stage_is_not(manifest):
    # the server's encode 75% over its 0.2 ms target, outside the device tolerance; the difference -14 ms
    errors = {"t_server_encode": 0.00015}
    cells = one_cell(trials(0.002, errors), manifest)
    cell = cells.iloc[0]
    target = TARGETS["t_server_encode"]
    assert DEFAULT.missed(target, target + errors["t_server_encode"])
    assert cell["emulation_error"] == pytest.approx(0.00015, abs=1e-9)
    assert cell["significant"] and cell["penalty"] < -0.01
    assert not cell["emulation_uncertain"]
    assert decision_vectors(cells).iloc[0]["vector"] == "1"


def test_the_local_baselines_error_counts_against_the_remote_ones(manifest):
    """A local kernel 0.5 ms slower than the device's makes offloading look 0.5 ms better than it is:
    the same flip as a remote stage 0.5 ms short."""
    comm = LOCAL + 0.0005 - sum(TARGETS.values()) - 0.0003
    cell = one_cell(trials(comm, {}, local_error=0.0005), manifest).iloc[0]
    assert cell["emulation_error"] == pytest.approx(-0.0005, abs=1e-9)
    assert bool(cell["emulation_uncertain"])


def test_without_a_device_there_is_no_error_and_nothing_is_uncertain(manifest):
    frame = trials(LOCAL - sum(TARGETS.values()) + 0.0002, {"t_client_encode": -0.0005})
    manifest.device = manifest.server_device = None
    for cells in (cell_table(frame, manifest), cell_table(frame)):
        assert cells["emulation_error"].isna().all() and not cells["emulation_uncertain"].any()
        assert decision_vectors(cells).iloc[0]["uncertain_rates"] == 0


def test_a_server_in_another_language_is_held_to_the_clients_targets_only(manifest):
    frame = trials(0.002, {"t_server_compute": 0.5, "t_client_decode": 0.0001})
    other = frame[frame["method"] == "raw"].assign(method="raw@go")
    cells = cell_table(pd.concat([frame, other], ignore_index=True), manifest).set_index("method")
    assert cells.loc["raw", "emulation_error"] == pytest.approx(0.5001, abs=1e-9)
    assert cells.loc["raw@go", "emulation_error"] == pytest.approx(0.0001, abs=1e-9)


@pytest.mark.parametrize(
    ("diff", "half", "error", "flips"),
    [
        (-1.0, 0.5, 0.0, False),  # decided, no error
        (-1.0, 0.5, -0.4, False),  # decided, corrected -0.6: still beyond the band
        (-1.0, 0.5, -0.6, True),  # corrected -0.4: within the band
        (-1.0, 0.5, -2.5, True),  # crosses zero altogether
        (1.0, 0.5, 0.6, True),  # a decided 0 whose corrected difference comes within the band
        (0.1, 0.5, 0.3, False),  # undecided, stays in its band
        (0.1, 0.5, -0.45, True),  # undecided, leaves it
        (0.1, 0.5, np.nan, False),  # no target
        (0.1, np.nan, -5.0, False),  # untested (a side with one trial)
    ],
)
def test_the_rule(diff, half, error, flips):
    assert bool(could_flip([diff], [half], [error])[0]) is flips


def test_the_summary_counts_them_and_names_the_worst(manifest):
    comm = LOCAL - sum(TARGETS.values()) - 0.0003 + 0.0005
    frame = trials(comm, {"t_client_encode": -0.0005})
    cells = cell_table(frame, manifest)
    text = summary_text("r", frame, cells, decision_vectors(cells), pd.DataFrame(
        {"op": ["mul"], "size": [100], "method": ["raw"], "cumulative_penalty": [-0.0003], "partial_penalty": [-0.0003]}
    ), manifest)  # fmt: skip
    assert "raw 1~ (1/1, 1 uncertain)" in text
    assert "emulation uncertain (~): 1 of 1 cells with device targets" in text
    assert "worst: mul 100 raw 10 Mbit/s: error -0.0005 s" in text


def test_compare_says_a_differing_decision_is_within_the_emulations_error(manifest):
    firm = cell_table(trials(0.002, {}), manifest)
    comm = LOCAL - sum(TARGETS.values()) - 0.0003 + 0.0005
    shaky = cell_table(trials(comm, {"t_client_encode": -0.0005}), manifest)
    stays = cell_table(trials(0.004 + LOCAL - sum(TARGETS.values()), {}), manifest)
    d = compare_decisions(["a", "b", "c"], [firm, shaky, stays])
    assert list(d[["a", "b", "c"]].iloc[0]) == ["1", "1~", "0"] and d["uncertain"].all()
    lines = summary_lines(Comparison(["a", "b", "c"], d, pd.DataFrame()))
    assert "1 of the 1 differing uncertain (~) in a run" in lines[1]
    assert lines[2].endswith("1 1~ 0 (uncertain: the emulation's error could flip it)")


def test_the_prediction_does_not_score_itself_on_uncertain_decisions():
    from analysis.predict import _scores

    cells = pd.DataFrame(
        {"mean": [1.0, 1.0], "local_mean": [2.0, 2.0], "offload": [1, 0], "predicted_remote_s": [1.0, 1.0],
         "emulation_uncertain": [False, True]}
    )  # fmt: skip
    scores = _scores("size", "100", cells)  # the second prediction is wrong, but against an uncertain cell
    assert (scores["decision_accuracy"], scores["lost_s"], scores["uncertain_cells"]) == (1.0, 0.0, 1)
    scores = _scores("size", "100", cells.assign(emulation_uncertain=False))
    assert (scores["decision_accuracy"], scores["lost_s"], scores["uncertain_cells"]) == (0.5, 1.0, 0)


def test_the_report_shows_the_mark_and_explains_it(tmp_path):
    """The stored v1 run (paper-p4, scaled), one cell's client encode 2 s above its target in every
    trial: that cell's 0 is the emulation's (its corrected difference is undecided), no other is."""
    import io
    import shutil
    from pathlib import Path

    from analysis import analyze

    stored = Path(__file__).resolve().parents[1] / "data" / "runs" / "v1-tiny"
    run = tmp_path / "v1"
    run.mkdir()
    shutil.copy(stored / "manifest.json", run / "manifest.json")
    lines = (stored / "trials.csv").read_text().splitlines(keepends=True)
    trials = pd.read_csv(io.StringIO("".join(x for x in lines if not x.startswith("#"))))
    cell = (trials["method"] == "raw") & (trials["size"] == 200) & (trials["rate_mbps"] == 100)
    trials.loc[cell, ["t_client_encode", "t_total"]] += 2.0
    (run / "trials.csv").write_text(
        "".join(x for x in lines if x.startswith("#")) + trials.to_csv(index=False)
    )
    text = io.StringIO()
    out = analyze(run, plots=False, out=text)
    page = (out / "report.html").read_text()
    assert 'id="uncertain"' in page and "1 cell(s) marked ~ in the decision vectors" in page
    assert "<td>0 0~</td>" in page and "a mark followed by ~ (1~, 0~, ?~)" in page
    assert "2 undecided, 1 uncertain (~: the emulation's error could flip them)" in page  # not firm
    assert "emulation uncertain (~): 1 of 12 cells" in text.getvalue()
