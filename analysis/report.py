"""`report.html`: one self-contained page (inline CSS, PNGs as data URIs) to look at a run.

Self-contained so it can be mailed, archived next to the paper draft or opened from disk on a machine
without network; the only links are relative ones to the SVGs and CSVs next to it, for convenience.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from analysis.decisions import format_mbps, undecided_cells
from analysis.devices import AS_HOST, calibration_table, device_key, role_devices, server_stage_note
from analysis.energy import disagreements
from analysis.fidelity_plots import WORK_OF_ROLE
from analysis.plots import Plot
from analysis.tables import FILES, cell_columns, csv_frame
from contracts.device import DeviceProfile
from contracts.power import Power
from contracts.run import Device, Manifest

KIND_TITLES = {
    "stages": "Completion time by stage (Fig. 4)",
    "decisions": "Offloading decisions (Fig. 5)",
    "map": "Decision maps",
    "ratios": "Ratios",
    "fidelity": "Device emulation: fidelity (client and server)",
    "servers": "gRPC servers by language",
}
CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 12px; margin: .5em 0 1em; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
th { background: #f3f3f3; } td.k, th.k { text-align: left; }
tr.missing td { background: #fde0e0; } tr.bad td { background: #fde0e0; }
pre { background: #f7f7f7; padding: .6em; overflow-x: auto; font-size: 12px; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 13px; color: #444; } nav a { margin-right: 1em; }
.note { font-size: 13px; color: #555; } .wide { overflow-x: auto; }
"""


def write_report(
    path: Path,
    *,
    run_id: str,
    summary: str,
    manifest: Manifest | None,
    tables: dict[str, pd.DataFrame],
    plots: list[Plot],
    power: dict[str, Power] | None = None,
    embed: bool = True,
) -> Path:
    """The run's report. `power`: the power figures of each client device by name ("": the run's one
    device; `analysis.energy.run_powers`). `embed`: figures inside the page as data (one file to mail or
    archive), else linked to the PNGs beside it (a shipped reproduction: its figures would be in the
    repository twice)."""
    cells = tables["cells"]
    parts = [
        f"<h1>Offloading analysis: {_e(run_id)}</h1>",
        '<nav><a href="#summary">Summary</a><a href="#manifest">Run</a><a href="#validation">Link validation</a>'
        '<a href="#counters">Link counters</a><a href="#device">Devices</a>'
        '<a href="#energy">Energy</a>'
        '<a href="#plots">Plots</a><a href="#tables">Tables</a></nav>',
        '<h2 id="summary">Summary</h2>',
        f"<pre>{_e(summary)}</pre>",
        '<p class="note">Decision vectors list, per rate in ascending order, 1 where the mean remote completion '
        "time is below the local one, 0 where it is not, ? where the cell is undecided (the difference is not "
        "significant in Welch's test at 95%, or a side has fewer than two successful trials) and - where the "
        "cell is missing (no successful trial or no local baseline); the count in brackets counts the 1s only "
        "and says how many rates are undecided or missing. Penalty = mean remote - mean local completion time "
        "(s), given for undecided cells too; a cumulative penalty is only given when every rate is known.</p>",
        *_paper_html(tables.get("paper_checks"), plots, embed),
        '<h2 id="manifest">Run</h2>',
        _manifest_html(manifest),
        '<h2 id="validation">Link validation</h2>',
        _validation_html(manifest),
        '<h2 id="counters">Link counters</h2>',
        _counters_html(tables.get("link_counters")),
        '<h2 id="device">Devices</h2>',
        _devices_html(manifest),
        '<h2 id="energy">Energy (a model)</h2>',
        _energy_html(tables, power),
        '<h2 id="plots">Plots</h2>',
        _plots_html(plots, manifest, embed),
        *_prediction_html(path.parent, embed),
        '<h2 id="tables">Tables</h2>',
        "<h3>Decision vectors</h3>",
        _table(tables["decision_vectors"]),
        "<h3>Cumulative penalty vectors (s)</h3>",
        _table(tables["cumulative_penalty"]),
        *_replicas_html(tables.get("replica_effect")),
        *_contention_html(tables.get("contention"), tables.get("contention_borders")),
        *_trial_fidelity_html(tables.get("trial_fidelity")),
        "<h3>Undecided cells</h3>",
        _undecided_html(cells),
        "<h3>Failures</h3>",
        _failures_html(cells),
        "<h3>Cells</h3>",
        '<p class="note">Missing cells are highlighted. Times in seconds; ci95 = half-width '
        "of the 95% confidence interval (Student t); diff_ci95 = half-width of the Welch 95% CI of remote - "
        "local.</p>",
        _cells_html(cells),
        '<p class="note">Files: ' + " ".join(f'<a href="{f}">{f}</a>' for f in FILES.values()) + "</p>",
    ]
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Offloading analysis: {_e(run_id)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )
    path.write_text(page, encoding="utf-8")
    return path


def _e(value) -> str:
    return html.escape(str(value))


def _table(frame: pd.DataFrame, classes: list[str] | None = None) -> str:
    if frame.empty:
        return "<p>(none)</p>"
    text = csv_frame(frame).to_html(
        index=False, na_rep="", float_format=lambda v: f"{v:.4g}", escape=True, border=0
    )
    head, sep, body = text.partition("<tbody>")
    rows = body.split("<tr>")
    if (
        classes and sep and len(rows) == len(classes) + 1
    ):  # else leave the rows plain rather than mislabel them
        body = rows[0] + "".join(
            (f'<tr class="{c}">' if c else "<tr>") + r for c, r in zip(classes, rows[1:], strict=True)
        )
        text = head + sep + body
    return text


def _cells_html(cells: pd.DataFrame) -> str:
    frame = cells.reindex(columns=cell_columns(cells))
    return '<div class="wide">' + _table(frame, ["missing" if m else "" for m in frame["missing"]]) + "</div>"


def _undecided_html(cells: pd.DataFrame) -> str:
    undecided = undecided_cells(cells)
    if undecided.empty:
        return "<p>None: every known cell's decision is significant.</p>"
    return (
        f'<p class="note">{len(undecided)} cell(s) marked ? in the decision vectors: their penalty (mean remote '
        "- mean local, s) lies within diff_ci95, the half-width of its Welch 95% CI (empty where a side has "
        "fewer than two successful trials), so the run cannot tell whether offloading pays there.</p>"
        + _table(undecided)
    )


def _failures_html(cells: pd.DataFrame) -> str:
    failed = cells[cells["failed"] > 0][["op", "size", "rate_mbps", "method", "n", "failed", "missing"]]
    if failed.empty:
        return "<p>No remote trial failed.</p>"
    return (
        '<p class="note">Failed trials per cell (the error texts are in trials.csv, column error).</p>'
        + _table(failed)
    )


def _plots_html(plots: list[Plot], manifest: Manifest | None = None, embed: bool = True) -> str:
    if not plots:
        return "<p>Plots were not made (analysis run without plots).</p>"
    out = []
    for kind, title in KIND_TITLES.items():
        chosen = [p for p in plots if p.kind == kind]
        if not chosen:
            continue
        out.append(f"<h3>{_e(title)}</h3>")
        if kind == "stages":
            out.append(f'<p class="note">{_e(server_stage_note(manifest))}</p>')
        out += [_figure_html(p, anchor=True, embed=embed) for p in chosen]
    return "\n".join(out)


def _image_src(png: Path, embed: bool) -> str:
    """An <img> source: the PNG's bytes as data, or its name beside the report."""
    if not embed:
        return _e(png.name)
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def _figure_html(plot: Plot, anchor: bool = False, embed: bool = True) -> str:
    """A figure as PNG, with its title and a link to its SVG; `anchor` gives it the id other sections
    link to (`fig-STEM`)."""
    ident = f' id="fig-{_e(plot.png.stem)}"' if anchor else ""
    return (
        f'<figure{ident}><img src="{_image_src(plot.png, embed)}" alt="{_e(plot.title)}">'
        f'<figcaption>{_e(plot.title)} (<a href="{_e(plot.svg.name)}">SVG</a>)</figcaption></figure>'
    )


def _manifest_html(manifest: Manifest | None) -> str:
    """Everything the manifest holds but its sections shown elsewhere, as it is (keys and values)."""
    if manifest is None:
        return "<p>No manifest.json in the run directory.</p>"
    shown_elsewhere = ("validation", "counters", "device", "server_device", "client_devices")
    data = manifest.as_dict()
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict | list) and k not in shown_elsewhere}
    out = [_kv(scalars)] if scalars else []
    for key, value in data.items():
        if key in shown_elsewhere:
            continue
        if isinstance(value, dict):
            out.append(f"<h3>{_e(key)}</h3>" + _kv(_flatten(value)))
        elif isinstance(value, list):
            out.append(f"<h3>{_e(key)}</h3>" + _records(value))
    return "\n".join(out)


def _counters_html(counters: pd.DataFrame | None) -> str:
    if counters is None or counters.empty:
        return "<p>No appliance counters recorded in the manifest (runs before counters were kept).</p>"
    return (
        "<p class=\"note\">Per rate and direction, what left the appliance's shaped port while the rate's "
        "trials ran (HTB class counters, exact) next to the payload the trials marshalled (bytes_up, "
        "bytes_down): wire_per_payload is the link's overhead (HTTP, TCP/IP and Ethernet headers, handshakes, "
        "the other direction's ACKs). Drops are the HTB class's and Open vSwitch's (whose statistics are "
        "refreshed every 5 s, so the last seconds may be missing).</p>" + _table(counters)
    )


def _energy_html(tables: dict[str, pd.DataFrame], power: dict[str, Power] | None) -> str:
    if not power or "decision_vectors_energy" not in tables:
        return (
            "<p>No power figures: the run's client device profile has none and no --power file was given, so there is "
            "no energy view.</p>"
        )
    figures = pd.DataFrame(
        [
            {
                **({"device": device} if device else {}),
                "figure": k,
                "watts": v["value"],
                "source": v["source"],
            }
            for device, figures_of in power.items()
            for k, v in figures_of.as_dict().items()
        ]
    )
    keys = ["op", "size", "method", "rates"]
    both = tables["decision_vectors"][[*keys, "vector"]].merge(
        tables["decision_vectors_energy"][[*keys, "vector"]], on=keys, suffixes=("_time", "_energy")
    )
    cells = tables["cells"]
    differ = disagreements(cells)
    return "\n".join(
        [
            '<p class="note">Energy is computed, not measured: the client device\'s power figures below times the '
            "stage times of every trial" + (", each device's own figures" if any(power) else "") + ". "
            "Local: cpu_active_w x t_total. Remote: cpu_active_w x (client encode + "
            "client decode) + radio_tx_w and radio_rx_w x communication, split by the bytes each way, + "
            "cpu_idle_w x the server's stages. Offloading saves energy (1) where the mean remote energy is "
            "below the local one, significantly (Welch, 95%); ? where the difference is not significant.</p>",
            _table(figures),
            "<h3>Decision vectors: time and energy side by side</h3>",
            _table(
                both,
                [
                    "missing" if t != e else ""
                    for t, e in zip(both["vector_time"], both["vector_energy"], strict=True)
                ],
            ),
            f"<h3>Cells where time and energy disagree ({len(differ)})</h3>",
            _table(differ)
            if len(differ)
            else "<p>None: saving time and saving energy call for the same decisions.</p>",
            "<h3>Cumulative energy penalty vectors (J)</h3>",
            _table(tables["cumulative_penalty_energy"]),
        ]
    )


def _devices_html(manifest: Manifest | None) -> str:
    """Both devices, client then server, each with its calibration tables (or what it ran as)."""
    if manifest is None:
        return "<p>No manifest.json in the run directory, so no devices are known.</p>"
    return "\n".join(
        f'<h3 id="device-{_e(device_key(role, device, manifest))}">{_e(_device_title(role, device, manifest))}'
        "</h3>\n" + _device_html(role, device)
        for role, device in role_devices(manifest)
    )


def _device_title(role: str, device: Device | None, manifest: Manifest) -> str:
    """`Client device`, and with clients of several devices `Client device paper-p4`."""
    name = device_key(role, device, manifest).removeprefix(role).removeprefix("-")
    return f"{role.capitalize()} device" + (f" {name}" if name else "")


def _device_html(role: str, device: Device | None) -> str:
    if device is None:
        return f"<p>{_e(AS_HOST[role].capitalize())}.</p>"
    profile = DeviceProfile.from_dict(device.profile)
    out = [
        _kv(
            {
                "device": profile.name,
                "description": profile.description,
                "mode": device.mode,
                "source": profile.source,
            }
        )
    ]
    if not device.calibrations:
        out.append(f"<p>Not calibrated: the manifest holds no calibration of the {role} host.</p>")
    for i, cal in enumerate(device.calibrations, 1):
        rows = calibration_table(cal)
        flagged = int(rows["flagged"].sum())
        achieved = (
            f"the wall time of the same work on the {role} host under its quota"
            if device.mode == "throttle"
            else f"the {role} host's CPU time for the same work times the calibrated slowdown, both the mean "
            "of alternate rounds of one run, sampled until each mean is known within half the tolerance or "
            "the work's budget is spent (samples: both together)"
        )
        shared = (
            f", testbed {cal.replica}'s, used by testbeds {', '.join(map(str, cal.replicas))} on the same host"
            if cal.replicas
            else ""
        )
        if cal.client:
            shared += f", on client host {_e(cal.client)}"
        if cal.reused:
            shared += (
                f"; used again by the session(s) started {', '.join(map(_e, cal.reused))} on the same machine"
            )
        out.append(
            f"<h4>Calibration {i} ({_e(cal.at)}{shared}): {flagged} of {len(rows)} outside "
            f"{cal.tolerance_pct:g}%</h4>"
            f'<p class="note">Target: the {role} device\'s time for the work from its profile '
            f"({WORK_OF_ROLE[role]}); achieved: {achieved}. Flagged rows are highlighted; trials of "
            "flagged work are marked emulation_flagged in trials.csv and cells.csv.</p>"
            + _table(rows, ["missing" if f else "" for f in rows["flagged"]])
        )
    return "\n".join(out)


def _validation_html(manifest: Manifest | None) -> str:
    if manifest is None or not manifest.validation:
        return "<p>No link validation recorded in the manifest.</p>"
    checks = [{k: v for k, v in asdict(c).items() if v is not None} for c in manifest.validation]
    return _records(checks, mark_bad=True)


def _records(items: list, mark_bad: bool = False) -> str:
    if not items:
        return "<p>(empty)</p>"
    if not all(isinstance(i, dict) for i in items):
        return f"<pre>{_e(json.dumps(items, indent=2, default=str))}</pre>"
    frame = pd.DataFrame([_flatten(i) for i in items])
    for column in frame.columns:
        if frame[column].map(lambda v: isinstance(v, list)).any():
            frame[column] = frame[column].map(
                lambda v: json.dumps(v, default=str) if isinstance(v, list) else v
            )
    classes = None
    if mark_bad and "ok" in frame.columns:
        classes = ["bad" if v is False else "" for v in frame["ok"]]
    if "rate_mbps" in frame.columns:
        frame["rate_mbps"] = frame["rate_mbps"].map(
            lambda r: format_mbps(r) if isinstance(r, int | float) else r
        )
    return _table(frame.astype(object).where(frame.notna(), ""), classes)


def _kv(data: dict) -> str:
    rows = "".join(
        f'<tr><th class="k">{_e(k)}</th><td class="k">{_e(_plain(v))}</td></tr>' for k, v in data.items()
    )
    return f"<table>{rows}</table>"


def _plain(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value, default=str)
    return str(value)


def _flatten(data: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _prediction_html(out_dir: Path, embed: bool = True) -> list[str]:
    """The prediction section, only when `analysis.predict` has written its outputs next to the report."""
    validation = out_dir / "prediction_validation.csv"
    if not validation.is_file():
        return []
    parts = [
        '<h2 id="prediction">Prediction</h2>',
        '<p class="note">Per-stage models fitted on this run (<a href="prediction_model.json">parameters</a>, '
        '<a href="prediction.csv">predicted cells</a>); validation refits without each size and each rate and '
        "predicts the held-out cells (lost_s: extra time of following the predicted decisions).</p>",
        _table(pd.read_csv(validation)),
    ]
    for png in sorted(out_dir.glob("prediction-border-*.png")):
        parts.append(f'<figure><img src="{_image_src(png, embed)}" alt="{_e(png.stem)}"></figure>')
    return parts


def _trial_fidelity_html(table: pd.DataFrame | None) -> list[str]:
    """The devices as the trials kept them: each kind of work's mean used time against its target."""
    if table is None:
        return []
    note = (
        "Per role, kind of work, op, size and method: the device profile's time (target_s) against the mean "
        "of the time the trials used for that stage (mean_s, ± ci95), over every successful trial; flagged "
        "outside the calibration's tolerance. A calibration checks the work in its own process; this checks "
        "it where it counted, inside the trials (analysis/trial_fidelity.py)."
    )
    return _section('<h3 id="trial-fidelity">The devices in the trials</h3>', note, table, table["flagged"])


def _paper_html(checks: pd.DataFrame | None, plots: list[Plot], embed: bool = True) -> list[str]:
    """ "Against the paper": each of its statements, the measured figure, and whether it holds; then the
    run's figures in the paper's form (Fig. 5 shown here, each size's Fig. 4 linked in Plots)."""
    if checks is None:
        return []
    from analysis.paper_checks import FAILS, held_out_summary

    note = (
        'The quantitative statements of section III of "The Effect of Data Marshalling on Computation '
        'Offloading Decisions", judged on this run (analysis/paper_checks.py). <em>fit</em>: the device '
        "profiles were derived from the statement; <em>held out</em>: they were not, so it validates them. "
        "Figures are means ± the half-width of their 95% CI; a decision statement is undecided when a cell it "
        f"needs is. {_e(held_out_summary(checks))}."
    )
    parts = _section('<h2 id="paper">Against the paper</h2>', note, checks, checks["holds"] == FAILS)
    if figures := [p for p in plots if p.kind == "decisions"]:
        parts.append("<h3>Offloading counts and cumulative penalties, as the paper's Fig. 5</h3>")
        parts += [_figure_html(p, embed=embed) for p in figures]
    if stages := [p for p in plots if p.kind == "stages"]:
        links = " ".join(
            f'<a href="#fig-{_e(p.png.stem)}">{_e(p.png.stem.removeprefix("stages-"))}</a>' for p in stages
        )
        parts.append(f"<p>Completion time by stage per size, as the paper's Fig. 4: {links}.</p>")
    return parts


def _replicas_html(table: pd.DataFrame | None) -> list[str]:
    """A sweep over several testbeds: every test of the replicas' samples, significant ones highlighted."""
    if table is None:
        return []
    note = (
        "The replicas compared per cell and quantity (Alexander-Govern test, unequal variances), p adjusted "
        "over all tests with Holm's method; significant: adjusted p below 5%. "
        f"{int(table['significant'].sum())} of {len(table)} tests significant."
    )
    return _section("<h3>Replica effect</h3>", note, table)


def _contention_html(table: pd.DataFrame | None, borders: pd.DataFrame | None) -> list[str]:
    """Several clients offloading at once: the border against their number, and every cell's means."""
    if table is None:
        return []
    note = (
        "Per cell, the decision at each number of clients offloading at once (in ascending order: 1 "
        "offloading pays, 0 it does not, ? undecided, - missing) and the border: the largest number of "
        "clients up to which it pays at every count measured."
    )
    detail = (
        "Each row: all the clients' trials of the cell. t_comm_mean is the shared link's share, "
        "t_server_queue_mean the wait for a server work slot, t_server_mean the server's stages; jain is "
        "Jain's fairness index of the clients' mean completion times (1: alike, 1/k: one took all)."
    )
    return [
        *_section("<h3>Several clients: the decision border</h3>", note, borders),
        *_section("<h3>Several clients: cells</h3>", detail, table),
    ]


def _section(heading: str, note: str, table: pd.DataFrame, highlight: pd.Series | None = None) -> list[str]:
    """An optional section: its heading, a note saying how to read it, and its table (rows where
    `highlight` is true marked as the report marks missing cells)."""
    classes = None if highlight is None else ["missing" if h else "" for h in highlight]
    return [heading, f'<p class="note">{note}</p>', _table(table, classes)]
