"""Clients of several devices in one sweep (issue 29): every remote cell is decided against its own
device's local baseline, with its own device's power figures and profile, and a run of one device is
analysed exactly as before.

The two-device run is synthetic (`tests.synthetic`) with known answers: `mul 400` by RAW at 100
Mbit/s, both clients at once, takes about 0.78 s on either device (the link and the server dominate);
locally it takes 0.32 s on FAST (a quarter of the model's) and 2.56 s on SLOW (twice it). So
offloading does not pay on FAST and pays on SLOW, while their pooled baseline (1.44 s) would say it
pays, or cannot tell, on both.
"""

from __future__ import annotations

import json
import re
from io import StringIO

import pandas as pd
import pytest

from analysis import analyze
from analysis.cells import client_device_names
from analysis.compare import compare_runs
from analysis.devices import device_key, device_lines, role_devices
from analysis.energy import trial_energy
from analysis.load import load_run
from analysis.plots import plan_figures
from analysis.predict_model import fit
from analysis.trial_fidelity import trial_fidelity
from contracts.errors import UserError
from contracts.power import Power
from contracts.run import MANIFEST_FILE, TRIALS_FILE, read_manifest
from contracts.stages import (
    label_base,
    label_clients,
    label_device,
    label_server,
    label_without_clients,
    label_without_device,
    method_codec,
    offload_label,
    on_device,
)
from tests.synthetic import SyntheticDevice, write_synthetic_run

FAST = SyntheticDevice(
    "fast", 0.25, {"cpu_active_w": 8.0, "cpu_idle_w": 1.0, "radio_tx_w": 2.0, "radio_rx_w": 1.5}
)
SLOW = SyntheticDevice(
    "slow", 2.0, {"cpu_active_w": 2.0, "cpu_idle_w": 0.25, "radio_tx_w": 1.0, "radio_rx_w": 0.5}
)
GRID = {"ops": ("mul",), "sizes": (400,), "rates": (100,), "methods": ("raw",), "reps": 5}


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    """The analysed two-device run: (run directory, analysis directory)."""
    run_dir = write_synthetic_run(tmp_path_factory.mktemp("devices") / "two", devices=(FAST, SLOW), **GRID)
    return run_dir, analyze(run_dir, plots=False, out=StringIO())


def test_a_label_names_its_device_last_and_every_parser_reads_around_it():
    label = offload_label("raw", "python", 2, parallelism=4, device="paper-p4")
    assert label == "raw-x2-p4 on paper-p4" and label_device(label) == "paper-p4"
    assert (label_clients(label), label_base(label), method_codec(label)) == (2, "raw", "raw")
    assert label_without_clients(label) == "raw-p4 on paper-p4" and label_without_device(label) == "raw-x2-p4"
    grpc = offload_label("grpc", "cpp", 3, device="phone-x4")  # a name with a setting mark's look
    assert grpc == "grpc@cpp-x3 on phone-x4" and (label_server(grpc), method_codec(grpc)) == (
        "cpp",
        "protobuf",
    )
    assert label_clients("raw on phone-x4") is None and label_base("raw on paper-p4") == "raw"
    # one device, or a local row: the labels of before
    assert offload_label("raw", "python", 2, device=None) == "raw-x2" and label_device("raw-x2") is None
    assert (
        offload_label("local", "", device="paper-p4") == "local" and on_device("local", "a") == "local on a"
    )


def test_each_device_is_decided_against_its_own_local_baseline(two_devices):
    _, out = two_devices
    cells = pd.read_csv(out / "cells.csv").set_index("method")
    assert list(cells.columns[:4]) == ["op", "size", "rate_mbps", "device"]  # method is the index here
    assert sorted(cells.index) == ["raw-x2 on fast", "raw-x2 on slow"] and not cells["missing"].any()
    fast, slow = cells.loc["raw-x2 on fast"], cells.loc["raw-x2 on slow"]
    assert (fast["device"], slow["device"], fast["local_n"], slow["local_n"]) == ("fast", "slow", 5, 5)
    assert fast["local_mean"] == pytest.approx(0.32, rel=0.06) and slow["local_mean"] == pytest.approx(
        2.56, rel=0.06
    )
    assert fast["mean"] == pytest.approx(slow["mean"], rel=0.06)  # the link and the server: alike
    vectors = pd.read_csv(out / "decision_vectors.csv", dtype=str).set_index("method")["vector"]
    assert vectors.to_dict() == {"raw-x2 on fast": "0", "raw-x2 on slow": "1"}
    # what pooling the baselines would have said: offloading pays on average, so FAST's 0 is its own
    assert (fast["local_mean"] + slow["local_mean"]) / 2 > fast["mean"]


def test_the_several_clients_view_keeps_each_device_apart(two_devices):
    _, out = two_devices
    borders = pd.read_csv(out / "contention_borders.csv", dtype={"decisions": str}).set_index("method")
    assert borders["border"].to_dict() == {"raw on fast": 0, "raw on slow": 2}
    table = pd.read_csv(out / "contention.csv").set_index("method")
    assert table.loc["raw on fast", "local_mean"] < 0.5 < 2 < table.loc["raw on slow", "local_mean"]


def test_energy_uses_each_devices_own_power_figures(two_devices):
    run_dir, out = two_devices
    cells = pd.read_csv(out / "cells.csv").set_index("device")
    trials = load_run(run_dir).trials
    for device in (FAST, SLOW):
        row = cells.loc[device.name]
        assert row["energy_local_j"] == pytest.approx(device.watts["cpu_active_w"] * row["local_mean"])
        power = Power(**device.watts, sources=dict.fromkeys(device.watts, "synthetic"))
        mine = trials[(trials["device"] == device.name) & (trials["method"] != "local")]
        assert row["energy_remote_j"] == pytest.approx(trial_energy(mine, power).mean())
    report = (out / "report.html").read_text()
    assert "each device&#x27;s own figures" in report or "each device's own figures" in report


def test_a_power_file_for_a_run_of_several_devices_is_refused(two_devices, tmp_path):
    run_dir, _ = two_devices
    power = tmp_path / "power.yaml"
    power.write_text("power:\n" + "".join(f"  {k}: {{value: 1, source: s}}\n" for k in FAST.watts))
    with pytest.raises(
        UserError, match=r"--power gives one device's power figures; .* 2 devices \(fast, slow\)"
    ):
        analyze(run_dir, plots=False, out=StringIO(), power=power)


def test_every_client_device_is_shown_and_checked_against_its_own_profile(two_devices):
    run_dir, out = two_devices
    run = load_run(run_dir)
    lines = device_lines(run.manifest)
    assert any(line.startswith("client device fast (scaled)") for line in lines)
    assert any(line.startswith("client device slow (scaled)") for line in lines)
    table = trial_fidelity(run.trials, run.manifest)
    client = table[table["role"] == "client"]
    # local compute, encode and decode of RAW, on each device: its own targets, 8x apart, both held
    assert client.groupby("device").size().to_dict() == {"fast": 3, "slow": 3}
    assert not client["flagged"].any() and client["error_pct"].abs().max() < 10
    # each device's figures and page anchors have names of their own
    keys = [device_key(role, device, run.manifest) for role, device in role_devices(run.manifest)]
    assert keys == ["client-fast", "client-slow", "server"]


def test_figures_against_a_baseline_are_drawn_per_device(two_devices):
    run_dir, out = two_devices
    cells = pd.read_csv(out / "cells.csv")
    vectors = pd.read_csv(out / "decision_vectors.csv", dtype=str)
    penalties = pd.read_csv(out / "cumulative_penalty.csv")
    stems = sorted(job.stem for job in plan_figures(cells, vectors, penalties))
    assert "stages-mul-400-fast" in stems and "stages-mul-400-slow" in stems
    assert "ratios-mul-fast" in stems and "ratios-mul-slow" in stems and "stages-mul-400" not in stems


def test_compare_keeps_one_local_baseline_per_device(two_devices, tmp_path):
    run_dir, _ = two_devices
    other = write_synthetic_run(tmp_path / "again", devices=(FAST, SLOW), seed=2, **GRID)
    result = compare_runs([run_dir, other])
    local = result.means[result.means["quantity"] == "local"]
    assert sorted(local["method"]) == ["local on fast", "local on slow"]
    assert result.decisions["agree"].all()


def test_the_prediction_refuses_a_run_of_several_devices(two_devices):
    run = load_run(two_devices[0])
    with pytest.raises(UserError, match="models one client device; the run's clients were of 2"):
        fit(run.trials, run.manifest)


def test_a_run_of_one_device_is_analysed_as_before(tmp_path):
    """The same run with the column `device` empty (format 9) and without it (format 8, as written
    before clients of several devices): every table the same, byte for byte, and no device in them."""
    grid = {"ops": ("mul",), "sizes": (200, 400), "rates": (10, 100), "methods": ("json", "raw")}
    new = write_synthetic_run(tmp_path / "new", fail_every=7, **grid)
    old = tmp_path / "old"
    old.mkdir()
    (old / "manifest.json").write_text((new / "manifest.json").read_text())
    (old / TRIALS_FILE).write_text(_format_8(new / TRIALS_FILE))
    outs = [analyze(run, plots=False, out=StringIO()) for run in (new, old)]
    files = sorted(p.name for p in outs[0].glob("*.csv"))
    assert "cells.csv" in files and files == sorted(p.name for p in outs[1].glob("*.csv"))
    for name in files:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    cells = pd.read_csv(outs[0] / "cells.csv")
    assert "device" not in cells and not cells["method"].str.contains(" on ").any()
    assert set(cells["method"]) == {"json", "raw"}


def _format_8(path) -> str:
    """trials.csv as format 8 wrote it: without the column `device`."""
    mark, header, *rows = path.read_text().splitlines()
    columns = header.split(",")
    at = columns.index("device")
    assert all(row.split(",")[at] == "" for row in rows if "," in row)  # no commas in these rows' texts
    cut = [",".join(c for i, c in enumerate(line.split(",")) if i != at) for line in (header, *rows)]
    return "\n".join([re.sub(r"format \d+$", "format 8", mark), *cut]) + "\n"


def test_each_client_is_named_by_the_profile_the_sweep_loaded(tmp_path):
    """A client's device given as a profile file whose `name:` is not its file's stem: the analysis
    takes the name the sweep recorded (`client_device_names`), as the rows have it; a run from
    before the record falls back on the references."""
    run_dir = write_synthetic_run(tmp_path / "two", devices=(FAST, SLOW), **GRID)
    path = run_dir / MANIFEST_FILE
    data = json.loads(path.read_text())
    data["experiment"]["client_devices"] = ["fast", "boards/slow-board.yaml"]
    path.write_text(json.dumps(data))
    assert client_device_names(read_manifest(path)) == ["fast", "slow"]
    data["client_device_names"] = []
    path.write_text(json.dumps(data))
    assert client_device_names(read_manifest(path)) == ["fast", "slow-board"]
