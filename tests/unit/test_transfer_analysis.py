"""A transfer run's analysis (`analysis.transfers`): throughput and energy per 100 MB per dataset and
setting, the effects in the study's form, and a run directory analysed end to end (table, figure,
report) from its files, with the energy the device's radio figures times the seconds."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import analyze
from analysis.transfers import effect, effect_lines, transfer_table
from contracts.datasets import DATASETS
from contracts.power import power_of_profile
from contracts.run import (
    MANIFEST_FILE,
    TRIALS_FILE,
    Device,
    Experiment,
    Manifest,
    TrialRecord,
    TrialWriter,
    write_manifest,
)
from testbed.devices import load_device

DEVICE = load_device("multilang-snapdragon600")
POWER = power_of_profile(DEVICE.as_dict(), "multilang-snapdragon600")


def _rows(delay: float | None = None) -> list[TrialRecord]:
    """Fetches whose seconds follow a model: a file's bytes at 20 Mbit/s, plus 50 ms per file over the
    channels (concurrency), plus 10 ms per extra stream; the I/O size changes nothing."""
    rows = []
    for dataset in ("html", "video"):
        ds = DATASETS[dataset]
        total = ds.total(1)
        for c in (1, 4):
            for p in (1, 2):
                for io in (1, 64):
                    for rep in range(3):
                        t = total * 8 / 20e6 + 0.05 * ds.files / c + 0.01 * (p - 1) + 0.001 * rep
                        rows.append(
                            TrialRecord(
                                op="fetch",
                                size=ds.files,
                                method="http",
                                ok=True,
                                rate_mbps=20.0,
                                rep=rep,
                                trial=len(rows),
                                dataset=dataset,
                                concurrency=c,
                                parallelism=p,
                                io_kb=io,
                                t_total=t,
                                t_comm=t,
                                t_request=t,
                                bytes_up=300 * ds.files * p,
                                bytes_down=total,
                            )  # fmt: skip
                        )
    rows.append(TrialRecord(op="fetch", size=4, method="http", ok=False, rate_mbps=20.0, dataset="video",
                            concurrency=1, parallelism=1, io_kb=1, error="status 404"))  # fmt: skip
    return rows


def _frame(rows) -> pd.DataFrame:
    return pd.DataFrame([vars(r) for r in rows])


def test_throughput_and_energy_per_setting():
    table = transfer_table(_frame(_rows()), POWER)
    assert len(table) == 2 * 2 * 2 * 2 and table["n"].sum() == 48 and table["failed"].sum() == 1
    html = table[(table["dataset"] == "html") & (table["concurrency"] == 1) & (table["parallelism"] == 1)]
    total = DATASETS["html"].total(1)
    seconds = total * 8 / 20e6 + 0.05 * 48 + 0.001
    assert html["throughput_mbps"].iloc[0] == pytest.approx(total * 8 / seconds / 1e6, rel=1e-3)
    # energy: radio power x seconds (receive for the bytes, send for the requests' bytes), per 100 MB
    up = 300 * 48
    joules = seconds * (POWER.radio_rx_w * total + POWER.radio_tx_w * up) / (total + up)
    assert html["energy_per_100mb_j"].iloc[0] == pytest.approx(joules * 100e6 / total, rel=1e-3)


def test_energy_follows_throughput_by_construction():
    table = transfer_table(_frame(_rows()), POWER)
    product = table["energy_per_100mb_j"] * table["throughput_mbps"]
    assert product.max() / product.min() == pytest.approx(1, abs=0.01)  # radio power x 800 Mbit


def test_each_effect_holds_the_other_settings_at_the_baseline():
    table = transfer_table(_frame(_rows()), POWER)
    curve = effect(table, "concurrency")
    assert set(curve["parallelism"]) == {1} and set(curve["io_kb"]) == {64}
    lines = effect_lines(table)
    html = next(line for line in lines if line.startswith("html") and "concurrency 1 -> 4" in line)
    assert "x)" in html and "energy per 100 MB -" in html
    assert any("parallelism 1 -> 2" in line for line in lines)
    io = next(line for line in lines if line.startswith("video") and "I/O size" in line)
    assert "(1.00x)" in io and "best" not in io


def test_a_peak_before_the_largest_setting_is_named():
    table = pd.DataFrame(
        {"dataset": "html", "rate_mbps": 20.0, "concurrency": [1, 2, 4], "parallelism": 1, "io_kb": 64,
         "throughput_mbps": [10.0, 18.0, 12.0], "energy_per_100mb_j": [240.0, 133.3, 200.0]}
    )  # fmt: skip
    (line,) = effect_lines(table)
    assert line == (
        "html @ 20 Mbit/s: concurrency 1 -> 4: 10.0 -> 12.0 Mbit/s (1.20x), energy per 100 MB -17%; "
        "best at 2: 18.0 Mbit/s (1.80x)"
    )


def test_a_delay_column_gives_a_curve_per_rtt():
    near, far = _frame(_rows()), _frame(_rows())
    near["delay_ms"], far["delay_ms"] = 0.0, 50.0
    table = transfer_table(pd.concat([near, far]), None)
    assert set(table["delay_ms"]) == {0.0, 50.0} and "energy_per_100mb_j" not in table
    assert (
        sum("delay_ms 50" in line for line in effect_lines(table))
        == sum("delay_ms 0" in line for line in effect_lines(table))
        > 0
    )


def test_a_transfer_run_is_analysed_from_its_files(tmp_path):
    writer = TrialWriter(tmp_path / TRIALS_FILE)
    for row in _rows():
        writer.write(row)
    writer.close()
    exp = Experiment(name="t", ops=("fetch",), sizes=(4, 48), rates_mbps=(20.0,), methods=("http",), reps=3,
                     local=False, datasets=("html", "video"), concurrency=(1, 4), parallelism=(1, 2),
                     io_kb=(1, 64))  # fmt: skip
    write_manifest(
        tmp_path / MANIFEST_FILE,
        Manifest(run_id="t-1", status="complete", experiment=exp, device=Device(DEVICE.as_dict(), "scaled")),
    )
    out = analyze(tmp_path, out=open(tmp_path / "summary.txt", "w"))  # noqa: SIM115
    table = pd.read_csv(out / "transfers.csv")
    assert len(table) == 16 and table["energy_per_100mb_j"].notna().all()
    assert sorted(p.name for p in out.glob("transfers-*.png")) == ["transfers-20mbit.png"]
    page = (out / "report.html").read_text()
    assert "Transfer analysis: t-1" in page and "data:image/png;base64," in page
    assert "html @ 20 Mbit/s: concurrency 1 -&gt; 4" in page
