"""The energy model: per-trial formulas with known answers, power files refused with file, key and
reason, and the energy view of a run (cells, vectors, penalties, report)."""

from __future__ import annotations

import math
from io import StringIO

import pandas as pd
import pytest

from analysis import analyze
from analysis.decisions import cumulative_penalties, decision_vectors
from analysis.energy import as_decision_cells, disagreements, energy_cells, trial_energy
from contracts.errors import UserError
from contracts.power import Power, load_power
from tests.synthetic import write_synthetic_run

POWER = Power(
    2.0, 0.5, 1.5, 1.0, dict.fromkeys(("cpu_active_w", "cpu_idle_w", "radio_tx_w", "radio_rx_w"), "t")
)
GOOD = """\
power:
  cpu_active_w: {value: 2.0, source: "a phone's busy CPU"}
  cpu_idle_w: {value: 0.5, source: idle}
  radio_tx_w: {value: 1.5, source: tx}
  radio_rx_w: {value: 1.0, source: rx}
"""


def trial(
    method, rate, t_total, enc=0.0, comm=0.0, s_dec=0.0, s_comp=0.0, s_enc=0.0, dec=0.0, up=0, down=0, ok=True
):
    return {
        "op": "mul", "size": 100, "rate_mbps": rate, "method": method, "ok": ok, "t_total": t_total,
        "t_client_encode": enc, "t_comm": comm, "t_server_decode": s_dec, "t_server_compute": s_comp,
        "t_server_encode": s_enc, "t_client_decode": dec, "bytes_up": up, "bytes_down": down,
    }  # fmt: skip


def test_trial_energy_follows_the_formulas():
    frame = pd.DataFrame(
        [
            trial("local", math.nan, 3.0),
            # 2 W x (0.5 + 0.25) + 4 s of comm split 3:1 by bytes (1.5 W x 3 + 1 W x 1) + 0.5 W x 2 s server
            trial(
                "raw",
                10,
                7.75,
                enc=0.5,
                comm=4.0,
                s_dec=0.5,
                s_comp=1.0,
                s_enc=0.5,
                dec=0.25,
                up=300,
                down=100,
            ),
            trial("raw", 10, 1.0, ok=False),
        ]
    )
    energy = trial_energy(frame, POWER)
    assert energy[0] == pytest.approx(6.0)
    assert energy[1] == pytest.approx(1.5 + 4.5 + 1.0 + 1.0)
    assert math.isnan(energy[2])


def test_energy_cells_decide_by_joules_not_seconds():
    trials = pd.DataFrame(
        [trial("local", math.nan, 3.0), trial("local", math.nan, 3.2)]
        # slower than local (5 s > 3.1 s) but mostly waiting on the radio: 2 x 0.2 + 1.5 x 4.6 x 0.5 + 1 x 4.6 x 0.5 + 0.5 x 0.2
        + [trial("raw", 10, 5.0, enc=0.1, comm=4.6, s_comp=0.2, dec=0.1, up=50, down=50)] * 2
    )
    cells = pd.DataFrame({"op": ["mul"], "size": [100], "rate_mbps": [10.0], "method": ["raw"], "offload": [0],
                          "significant": [True], "penalty": [1.9]})  # fmt: skip
    out = energy_cells(cells, trials, POWER)
    row = out.iloc[0]
    assert row["energy_local_j"] == pytest.approx(2.0 * 3.1)
    assert row["energy_remote_j"] == pytest.approx(0.4 + 3.45 + 2.3 + 0.1)
    assert row["energy_offload"] == 0 and row["energy_penalty_j"] == pytest.approx(6.25 - 6.2)
    assert row["energy_ci95"] == pytest.approx(0.0)  # identical repetitions: no spread
    vectors = decision_vectors(as_decision_cells(out))
    # 6.25 J against 6.0 and 6.4 J: slower, but not significantly (two local trials), so undecided
    assert vectors.iloc[0]["vector"] == "?" and vectors.iloc[0]["undecided_rates"] == 1
    assert cumulative_penalties(as_decision_cells(out)).iloc[0]["cumulative_penalty"] == pytest.approx(0.05)
    assert disagreements(out).empty


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (GOOD.replace("value: 2.0", "value: -1"), "power.cpu_active_w.value': -1 is not a non-negative"),
        (GOOD.replace("  radio_rx_w: {value: 1.0, source: rx}\n", ""), "power.radio_rx_w': is missing"),
        (GOOD + "  screen_w: {value: 1, source: s}\n", "power.screen_w': unknown key"),
        (GOOD.replace("source: idle", "source: ''"), "power.cpu_idle_w.source': is empty"),
        (GOOD.replace("{value: 1.5, source: tx}", "1.5"), "power.radio_tx_w': must be a mapping"),
        ("device: x\n", "power': is missing"),
    ],
)
def test_bad_power_files_name_the_file_key_and_reason(tmp_path, text, words):
    path = tmp_path / "power.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as exc:
        load_power(path)
    assert str(path) in exc.value.message and words in exc.value.message


def test_analyze_with_a_power_file_writes_the_energy_view(tmp_path):
    run_dir = write_synthetic_run(
        tmp_path / "e", ops=("mul",), sizes=(200, 400), rates=(10, 40), methods=("raw", "json")
    )
    power = tmp_path / "power.yaml"
    power.write_text(GOOD)
    out = analyze(run_dir, plots=False, out=StringIO(), power=power)
    cells = pd.read_csv(out / "cells.csv")
    assert cells["energy_remote_j"].notna().all() and set(cells["energy_offload"].dropna()) <= {0, 1}
    for name in ("decision_vectors_energy.csv", "cumulative_penalty_energy.csv"):
        assert len(pd.read_csv(out / name)) == 4  # op x size x method, as the time-based files
    page = (out / "report.html").read_text()
    assert 'id="energy"' in page and "a phone's busy CPU" in page and "side by side" in page
    # without power figures the energy files go away and the columns stay, empty
    analyze(run_dir, plots=False, out=StringIO())
    assert not (out / "decision_vectors_energy.csv").exists()
    assert pd.read_csv(out / "cells.csv")["energy_remote_j"].isna().all()
