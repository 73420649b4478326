"""A run made with device profiles: the report and the summary show the client's and the server's
device (or that the server ran as its host), each calibration table and a fidelity figure per
device, and flagged emulation reaches cells.csv."""

from __future__ import annotations

import html
import json
import shutil
import xml.etree.ElementTree as ET
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest

from analysis import analyze
from analysis.fidelity_plots import across_sizes, fidelity_figure
from analysis.plots import BUILDERS, fidelity_jobs
from contracts.run import TrialWriter, read_manifest, read_trials
from contracts.tolerance import DeviceTolerance
from testbed.devices import load_device
from tests.synthetic import write_synthetic_run


def test_device_calibration_fidelity_and_flags(tmp_path):
    run_dir = write_synthetic_run(
        tmp_path / "dev-1", ops=("mul",), sizes=(200, 400), rates=(10, 40), methods=("raw", "json"), reps=2
    )
    device = load_device("paper-p4")
    rows = [
        {"work": "kernel", "op": "mul", "size": s, "target_s": device.compute_s("mul", s),
         "achieved_s": device.compute_s("mul", s) * (1.3 if s == 200 else 1.02),
         "error_pct": 30.0 if s == 200 else 2.0, "flagged": s == 200}
        for s in (200, 400)
    ]  # fmt: skip
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["device"] = {
        "profile": device.as_dict(),
        "mode": "scaled",
        "calibrations": [{"at": "2026-11-23T15:00:00", "tolerance_pct": 10.0, "rows": rows}],
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    # the sweep marks the local trials of the flagged (mul, 200)
    path = run_dir / "trials.csv"
    records = read_trials(path).records
    path.unlink()
    writer = TrialWriter(path)
    for t in records:
        writer.write(replace(t, emulation_flagged=t.method == "local" and t.size == 200))
    writer.close()

    out = analyze(run_dir, out=StringIO())
    assert (out / "fidelity-client.png").stat().st_size > 0 and (out / "fidelity-client.svg").exists()
    page = (out / "report.html").read_text()
    assert 'id="device"' in page and "paper-p4" in page and "Calibration 1" in page
    assert "1 of 2 outside 10%" in page and "target vs achieved (scaled)" in page
    cells = pd.read_csv(out / "cells.csv")
    flagged = cells.groupby("size")["emulation_flagged"].all()
    assert bool(flagged[200]) and not bool(flagged[400])  # every cell compared with a flagged baseline


def test_a_run_without_a_device_says_so(tmp_path):
    run_dir = write_synthetic_run(
        tmp_path / "plain", ops=("mul",), sizes=(200,), rates=(10,), methods=("raw",)
    )
    text = StringIO()
    out = analyze(run_dir, out=text)
    page = (out / "report.html").read_text()
    assert "No device profile" in page and "The server ran as its host (no device profile)." in page
    assert "client: no device profile" in text.getvalue()
    assert not list(out.glob("fidelity*"))


# --- both devices: the client's and the server's ---------------------------------------------------

CLIENT, SERVER = "paper-p4", "multilang-i5-5200u"
V1 = Path(__file__).resolve().parents[1] / "data" / "runs" / "v1-tiny"
SIZES = (200, 400)
CODECS = ("raw", "json")


def calibration(role: str, name: str, flag: tuple[int, str]) -> dict:
    """A calibration of `role`'s host for device `name`, as the sweep records it: the profile's target
    for every kind of work of the grid, achieved within 3% but for the work `flag` (size, work), 25%
    slow. Kernel targets come from the profile; the codecs' from its throughput for 16 bytes/element."""
    device = load_device(name)
    rows = []
    for size in SIZES:
        works = [("kernel", device.compute_s("mul", size))]
        data = 2 * size * size * 8  # both operands (encode on the client, decode on the server)
        for codec in CODECS:
            works += [(f"{codec} encode", device.marshal_s(codec, "encode", data))]
            works += [(f"{codec} decode", device.marshal_s(codec, "decode", data))]
        for work, target in works:
            error = 25.0 if (size, work) == flag else 3.0
            rows.append(
                {"work": work, "op": "mul", "size": size, "target_s": target,
                 "achieved_s": target * (1 + error / 100), "error_pct": error, "flagged": error > 10}
            )  # fmt: skip
    cal = {"at": f"2026-11-24T07:0{len(role)}:00", "tolerance_pct": 10.0, "rows": rows}
    return {"profile": device.as_dict(), "mode": "scaled", "calibrations": [cal]}


def run_with_devices(run_dir: Path, server: bool) -> Path:
    """A small synthetic run whose manifest holds the client's device and, if `server`, the server's."""
    write_synthetic_run(run_dir, ops=("mul",), sizes=SIZES, rates=(10, 40), methods=CODECS, reps=2)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["device"] = calibration("client", CLIENT, (200, "json encode"))
    if server:
        manifest["server_device"] = calibration("server", SERVER, (400, "kernel"))
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    run_dir = run_with_devices(tmp_path_factory.mktemp("runs") / "devices-2", server=True)
    text = StringIO()
    out = analyze(run_dir, out=text)
    return out, (out / "report.html").read_text(), text.getvalue()


def section(page: str, start: str, end: str) -> str:
    """The part of the page from the element with id `start` to the one with id `end`."""
    return page[page.index(f'id="{start}"') : page.index(f'id="{end}"')]


def test_the_report_shows_both_devices_each_with_its_calibration_table(both):
    _, page, _ = both
    client = section(page, "device-client", "device-server")
    server = section(page, "device-server", "summary")
    for part, name in ((client, CLIENT), (server, SERVER)):
        profile = load_device(name)
        assert f'<td class="k">{name}</td>' in part
        assert html.escape(profile.description) in part and '<td class="k">scaled</td>' in part
        assert "Calibration 1" in part and "1 of 10 outside 10%" in part
        table = part[part.index("Calibration 1") :]
        assert table.count('<tr class="missing">') == 1  # the flagged row, highlighted
        assert table.count("<tr>") == 9  # and the nine within tolerance, plain
    flagged = lambda part: part.split('<tr class="missing">')[1].split("</tr>")[0]  # noqa: E731
    assert "json encode" in flagged(client) and "<td>200</td>" in flagged(client)
    assert "kernel" in flagged(server) and "<td>400</td>" in flagged(server)
    assert "decode: the request, encode: the response" in server
    assert "the server host's CPU time" in server and "the client host's CPU time" in client
    assert "server_device.profile" not in page  # shown in its own section, not flattened in the run's


def test_each_device_has_its_own_fidelity_figure_named_by_role(both):
    out, page, _ = both
    for role, name in (("client", CLIENT), ("server", SERVER)):
        assert (out / f"fidelity-{role}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        ET.parse(out / f"fidelity-{role}.svg")
        caption = f"{role} device {name}: target vs achieved (scaled)"
        assert f'alt="{caption}"' in page and f'<a href="fidelity-{role}.svg">' in page
    assert not (out / "fidelity.png").exists()


def test_the_fidelity_figures_titles_name_the_role_and_device(tmp_path):
    manifest = read_manifest(run_with_devices(tmp_path / "titles", server=True) / "manifest.json")
    jobs = fidelity_jobs(manifest)
    assert [j.stem for j in jobs] == ["fidelity-client", "fidelity-server"]
    for job, (role, name) in zip(jobs, (("client", CLIENT), ("server", SERVER)), strict=True):
        fig = BUILDERS[job.figure](*job.args)
        assert fig.get_suptitle().startswith(f"{role} device {name}, scaled mode")
        assert len(fig.axes[0].get_lines()) == 2 * 5  # target and achieved per kind of work (5 per size)


def test_the_summary_names_both_devices_and_their_flagged_work(both):
    lines = both[2].splitlines()
    p4, i5 = load_device(CLIENT), load_device(SERVER)
    assert f"client device {CLIENT} (scaled): {p4.description}" in lines
    assert f"server device {SERVER} (scaled): {i5.description}" in lines
    assert "  calibration 1 (2026-11-24T07:06:00): 1 of 10 outside 10%: mul 200 json encode +25%" in lines
    assert "  calibration 1 (2026-11-24T07:06:00): 1 of 10 outside 10%: mul 400 kernel +25%" in lines


def test_the_stage_plots_are_explained_as_the_server_devices_times(both):
    _, page, _ = both
    stages = page[page.index('id="stages"') :]
    stages = stages[: stages.index("<figure")]
    assert f"the server device {SERVER}&#x27;s times (scaled mode)" in stages
    assert "wall_server_* and cpu_server_*" in stages


def test_a_run_without_a_server_device_says_the_server_ran_as_its_host(tmp_path):
    run_dir = run_with_devices(tmp_path / "client-only", server=False)
    text = StringIO()
    out = analyze(run_dir, out=text)
    page = (out / "report.html").read_text()
    assert "The server ran as its host (no device profile)." in section(page, "device-server", "summary")
    assert "server: the server ran as its host (no device profile)" in text.getvalue().splitlines()
    assert sorted(p.name for p in out.glob("fidelity*")) == ["fidelity-client.png", "fidelity-client.svg"]
    assert "are the server host&#x27;s measured times" in page


def test_the_stored_v1_run_shows_its_client_device_and_a_server_that_ran_as_its_host(tmp_path):
    """v1-tiny predates server devices: its tables stay as stored (tests/unit/test_run_contract.py),
    and its report and summary show its one device and say the server ran as its host."""
    run_dir = tmp_path / "v1-tiny"
    run_dir.mkdir()
    for name in ("trials.csv", "manifest.json"):
        shutil.copy(V1 / name, run_dir / name)
    text = StringIO()
    out = analyze(run_dir, out=text)
    page = (out / "report.html").read_text()
    assert "Calibration 1" in section(page, "device-client", "device-server")
    assert "The server ran as its host (no device profile)." in section(page, "device-server", "summary")
    lines = text.getvalue().splitlines()
    stored = read_manifest(V1 / "manifest.json").device.profile  # as it was then, not today's paper-p4
    assert f"client device {stored['name']} (scaled): {stored['description']}" in lines
    assert "  calibration 1 (2026-11-24T04:05:27+0000): 0 of 14 outside 10%" in lines
    assert "server: the server ran as its host (no device profile)" in lines
    assert sorted(p.name for p in out.glob("fidelity*")) == ["fidelity-client.png", "fidelity-client.svg"]


def test_a_start_up_row_of_no_size_is_drawn_flat_across_the_sizes():
    rows = pd.DataFrame(
        [
            {"work": "kernel", "op": "mul", "size": s, "target_s": s / 100, "achieved_s": s / 100,
             "error_pct": 0.0, "flagged": False}
            for s in (200, 400)
        ]
        + [{"work": "server_start", "op": "any", "size": None, "target_s": 0.15, "achieved_s": 0.16,
            "error_pct": 6.7, "flagged": False}]
    )  # fmt: skip
    spread = across_sizes(rows)
    start = spread[spread["work"] == "server_start"]
    assert list(start["size"]) == [200, 400] and set(start["achieved_s"]) == {0.16}
    fig = fidelity_figure(rows, "paper-i3", "scaled", DeviceTolerance(10.0), role="server")
    assert len(fig.axes[0].get_lines()) == 2 * 2  # target and achieved, kernel and start-up


def test_a_flagged_start_up_is_named_as_the_stacks_own_work(tmp_path):
    """The start-up is no op's and no size's: the summary names it alone, and the sizes of the other
    rows stay integers though the start-up's empty size turns the column into floats."""
    run_dir = run_with_devices(tmp_path / "start-up", server=True)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["server_device"]["calibrations"][0]["rows"].append(
        {"work": "server_start", "op": "any", "size": None, "target_s": 0.15, "achieved_s": 0.1326,
         "error_pct": -11.6, "flagged": True}
    )  # fmt: skip
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    text = StringIO()
    analyze(run_dir, plots=False, out=text)
    assert "2 of 11 outside 10%: mul 400 kernel +25%; server_start -11.6%" in text.getvalue()


def test_each_client_machine_of_an_ssh_lab_shows_its_own_last_calibration(tmp_path):
    """An SSH lab's client machines each calibrate for the device (`client: client2`): the summary
    says how each one's last calibration held, and the report names the machine of each."""
    run_dir = run_with_devices(tmp_path / "machines", server=False)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (first,) = manifest["device"]["calibrations"]
    rows = [dict(r) for r in first["rows"]]
    rows[0] |= {"achieved_s": rows[0]["target_s"] * 1.3, "error_pct": 30.0, "flagged": True}
    manifest["device"]["calibrations"].append({**first, "rows": rows, "client": "client2"})
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    text = StringIO()
    out = analyze(run_dir, plots=False, out=text)
    lines = text.getvalue().splitlines()
    assert any(line.strip().startswith("calibration 1 (") and " on client: 1 of 10" in line for line in lines)
    assert any(
        line.strip().startswith("calibration 2 (") and " on client2: 2 of 10" in line for line in lines
    )
    assert "on client host client2" in (out / "report.html").read_text()
