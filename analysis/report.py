"""`report.html`: one self-contained page (inline CSS, PNGs as data URIs) to look at a run.

It reads like a paper's results section: first the question and the answer (where offloading pays,
where the time goes, what each method costs over all rates: figures, each with a sentence computed from
its data), then one table saying how faithful the emulation was, then the rest (against the paper,
other figures, energy, prediction), and last, collapsed, everything to look up: the tables, the run's
metadata and settings, link validation and counters, the devices' calibrations and the terminal summary.

Self-contained so it can be mailed, archived next to the paper draft or opened from disk on a machine
without network; the only links are relative ones to the SVGs and CSVs next to it, for convenience.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from analysis.decisions import undecided_cells
from analysis.devices import AS_HOST, calibration_table, device_key, role_devices
from analysis.emulation_error import COLUMNS as EMULATION_COLUMNS
from analysis.energy import disagreements
from analysis.fidelity_plots import WORK_OF_ROLE
from analysis.plots import Plot
from analysis.report_fidelity import verdict_html
from analysis.report_figures import delay_html, fidelity_figures_html, more_figures_html, results_html
from analysis.report_findings import answer, question
from analysis.report_html import details, e, flatten, image_src, kv, records, section, table, write_page
from analysis.tables import FILES, cell_columns
from contracts.device import DeviceProfile, Mode
from contracts.power import Power
from contracts.run import Device, Manifest

DECISION_NOTE = (
    "Decision vectors list, per rate in ascending order, 1 where the mean remote completion time is below "
    "the local one, 0 where it is not, ? where the cell is undecided (the difference is not significant in "
    "Welch's test at 95%, or a side has fewer than two successful trials) and - where the cell is missing "
    "(no successful trial or no local baseline); a mark followed by ~ (1~, 0~, ?~) is of a cell marked "
    "emulation_uncertain: the emulation's error on its remote - local difference (each stage's deviation "
    "from the device's target, with its 95% CI) could flip its decision or its undecided state, so the "
    "mark is not the device's for sure. The count in brackets counts the 1s only and says how many rates "
    "are undecided, missing or uncertain. Penalty = mean remote - mean local completion time (s), given "
    "for undecided cells too; a cumulative penalty is only given when every rate is known."
)


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
    optional = {
        "paper": _paper_html(tables.get("paper_checks"), plots),
        "plots": more_figures_html(plots, embed),
        "prediction": _prediction_html(path.parent, embed),
    }
    parts = [
        f"<h1>Offloading analysis: {e(run_id)}</h1>",
        *(
            [f'<p class="lead">{question(cells)}</p>', f'<p class="lead">{answer(cells)}</p>']
            if len(cells)
            else []
        ),
        _nav(plots, optional),
        *results_html(plots, tables, manifest, embed),
        '<h2 id="fidelity">How faithful the emulation was</h2>',
        '<p class="note">Each emulated device and the link: what it should have been, how it was checked and '
        "the case furthest from its target; a highlighted row has checks outside their tolerance. Each check "
        "links to its detail below.</p>",
        verdict_html(manifest, tables),
        fidelity_figures_html(plots, embed),
        *optional["paper"],
        *optional["plots"],
        '<h2 id="energy">Energy (a model)</h2>',
        _energy_html(tables, power),
        *optional["prediction"],
        '<h2 id="details">Details</h2>',
        '<p class="note">Everything else the analysis has, collapsed: click a title to open it.</p>',
        *_tables_details(tables),
        *_run_details(manifest, tables),
        details(
            "Terminal summary",
            [f"<pre>{e(summary)}</pre>", f'<p class="note">{DECISION_NOTE}</p>'],
            "summary",
        ),
        '<p class="note">Files: ' + " ".join(_files(path.parent)) + "</p>",
    ]
    return write_page(path, f"Offloading analysis: {run_id}", parts)


def _nav(plots: list[Plot], optional: dict[str, list[str]]) -> str:
    """Links to the page's sections that it has."""
    kinds = {p.kind for p in plots}
    links = [("decisions", "Where offloading pays", True)]
    links += [("stages", "Stages", "stages" in kinds), ("penalties", "Penalties", "decisions" in kinds)]
    links += [("fidelity", "Fidelity", True), ("paper", "Against the paper", bool(optional["paper"]))]
    links += [("plots", "More figures", bool(optional["plots"])), ("energy", "Energy", True)]
    links += [("prediction", "Prediction", bool(optional["prediction"])), ("details", "Details", True)]
    return "<nav>" + "".join(f'<a href="#{k}">{e(t)}</a>' for k, t, shown in links if shown) + "</nav>"


def _files(out_dir: Path) -> list[str]:
    """Links to the tables the analysis wrote beside the page (those of this run only)."""
    return [f'<a href="{f}">{f}</a>' for f in FILES.values() if (out_dir / f).is_file()]


def _tables_details(tables: dict[str, pd.DataFrame]) -> list[str]:
    """The analysis's tables, each collapsed."""
    cells = tables["cells"]
    return [
        details(
            "Decision vectors", [f'<p class="note">{DECISION_NOTE}</p>', table(tables["decision_vectors"])]
        ),
        details("Cumulative penalty vectors (s)", table(tables["cumulative_penalty"])),
        *_replicas_html(tables.get("replica_effect")),
        *_contention_html(tables.get("contention"), tables.get("contention_borders")),
        *delay_html(tables),
        *_trial_fidelity_html(tables.get("trial_fidelity")),
        details("Undecided cells", _undecided_html(cells), "undecided"),
        details("Cells the emulation could flip (~)", _uncertain_html(cells), "uncertain"),
        details("Failures", _failures_html(cells), "failures"),
        details(
            "Cells",
            '<p class="note">Missing cells are highlighted. Times in seconds; ci95 = half-width of the 95% '
            "confidence interval (Student t); diff_ci95 = half-width of the Welch 95% CI of remote - local.</p>"
            + _cells_html(cells),
            "cells",
        ),
    ]


def _run_details(manifest: Manifest | None, tables: dict[str, pd.DataFrame]) -> list[str]:
    """The run as the manifest records it, each part collapsed: metadata, settings, the link's
    validation and counters, the devices with their calibrations."""
    return [
        details("Run metadata", _manifest_html(manifest), "manifest"),
        details("Settings (the experiment)", _settings_html(manifest), "settings"),
        details("Link validation", _validation_html(manifest), "validation"),
        details("Link counters", _counters_html(tables.get("link_counters")), "counters"),
        details("Devices and their calibrations", _devices_html(manifest), "device"),
    ]


def _cells_html(cells: pd.DataFrame) -> str:
    frame = cells.reindex(columns=cell_columns(cells))
    return '<div class="wide">' + table(frame, ["missing" if m else "" for m in frame["missing"]]) + "</div>"


def _undecided_html(cells: pd.DataFrame) -> str:
    undecided = undecided_cells(cells)
    if undecided.empty:
        return "<p>None: every known cell's decision is significant.</p>"
    return (
        f'<p class="note">{len(undecided)} cell(s) marked ? in the decision vectors: their penalty (mean remote '
        "- mean local, s) lies within diff_ci95, the half-width of its Welch 95% CI (empty where a side has "
        "fewer than two successful trials), so the run cannot tell whether offloading pays there.</p>"
        + table(undecided)
    )


def _uncertain_html(cells: pd.DataFrame) -> str:
    """The cells marked ~: their difference and its Welch half-width beside the emulation's error on it."""
    if "emulation_error" not in cells or cells["emulation_error"].isna().all():
        return "<p>No stage had a device target (no device profile), so no emulation error to weigh.</p>"
    chosen = cells[cells["emulation_uncertain"].astype(bool)]
    if chosen.empty:
        return "<p>None: no cell's decision or undecided state could flip by the emulation's error.</p>"
    columns = [
        "op",
        "size",
        "rate_mbps",
        "method",
        "penalty",
        "diff_ci95",
        "significant",
        *EMULATION_COLUMNS[:2],
    ]
    return (
        f'<p class="note">{len(chosen)} cell(s) marked ~ in the decision vectors: emulation_error is the sum, '
        "over the stages of the cell's remote trials, of each stage's mean minus the device's target, minus "
        "the local baseline's kernel deviation (s), emulation_error_ci95 its 95% half-width (the stages' "
        "combined in quadrature). With every emulated stage at its target (the penalty minus the error), the "
        "penalty comes within diff_ci95 of zero or crosses it (a decided cell), or leaves that band (an "
        "undecided one): the run cannot tell the device's answer from the emulation's there.</p>"
        + table(chosen[columns])
    )


def _failures_html(cells: pd.DataFrame) -> str:
    failed = cells[cells["failed"] > 0][["op", "size", "rate_mbps", "method", "n", "failed", "missing"]]
    if failed.empty:
        return "<p>No remote trial failed.</p>"
    return (
        '<p class="note">Failed trials per cell (the error texts are in trials.csv, column error).</p>'
        + table(failed)
    )


SHOWN_ELSEWHERE = ("validation", "counters", "device", "server_device", "client_devices", "experiment")


def _manifest_html(manifest: Manifest | None) -> str:
    """Everything the manifest holds but its sections shown elsewhere, as it is (keys and values)."""
    if manifest is None:
        return "<p>No manifest.json in the run directory.</p>"
    data = manifest.as_dict()
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict | list) and k not in SHOWN_ELSEWHERE}
    out = [kv(scalars)] if scalars else []
    for key, value in data.items():
        if key in SHOWN_ELSEWHERE:
            continue
        if isinstance(value, dict):
            out.append(f"<h3>{e(key)}</h3>" + kv(flatten(value)))
        elif isinstance(value, list):
            out.append(f"<h3>{e(key)}</h3>" + records(value))
    return "\n".join(out)


def _settings_html(manifest: Manifest | None) -> str:
    """The experiment the sweep ran, as the manifest holds it."""
    if manifest is None:
        return "<p>No manifest.json in the run directory.</p>"
    return "<h3>experiment</h3>" + kv(flatten(manifest.as_dict()["experiment"]))


def _counters_html(counters: pd.DataFrame | None) -> str:
    if counters is None or counters.empty:
        return "<p>No appliance counters recorded in the manifest (runs before counters were kept).</p>"
    return (
        "<p class=\"note\">Per rate and direction, what left the appliance's shaped port while the rate's "
        "trials ran (HTB class counters, exact) next to the payload the trials marshalled (bytes_up, "
        "bytes_down): wire_per_payload is the link's overhead (HTTP, TCP/IP and Ethernet headers, handshakes, "
        "the other direction's ACKs). Drops are the HTB class's and Open vSwitch's (whose statistics are "
        "refreshed every 5 s, so the last seconds may be missing).</p>" + table(counters)
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
    differ = disagreements(tables["cells"])
    return "\n".join(
        [
            f"<p>Saving time and saving energy call for different decisions in {len(differ)} cell(s).</p>",
            '<p class="note">Energy is computed, not measured: the client device\'s power figures below times the '
            "stage times of every trial" + (", each device's own figures" if any(power) else "") + ". "
            "Local: cpu_active_w x t_total. Remote: cpu_active_w x (client encode + "
            "client decode) + radio_tx_w and radio_rx_w x communication, split by the bytes each way, + "
            "cpu_idle_w x the server's stages. Offloading saves energy (1) where the mean remote energy is "
            "below the local one, significantly (Welch, 95%); ? where the difference is not significant.</p>",
            table(figures),
            details(
                "Decision vectors: time and energy side by side",
                table(
                    both,
                    [
                        "missing" if t != e_ else ""
                        for t, e_ in zip(both["vector_time"], both["vector_energy"], strict=True)
                    ],
                ),
            ),
            details(
                f"Cells where time and energy disagree ({len(differ)})",
                table(differ)
                if len(differ)
                else "<p>None: saving time and saving energy call for the same decisions.</p>",
            ),
            details("Cumulative energy penalty vectors (J)", table(tables["cumulative_penalty_energy"])),
        ]
    )


def _devices_html(manifest: Manifest | None) -> str:
    """Both devices, client then server, each with its calibration tables (or what it ran as)."""
    if manifest is None:
        return "<p>No manifest.json in the run directory, so no devices are known.</p>"
    return "\n".join(
        f'<h3 id="device-{e(device_key(role, device, manifest))}">{e(_device_title(role, device, manifest))}'
        "</h3>\n" + _device_html(role, device)
        for role, device in role_devices(manifest)
    )


def _device_title(role: str, device: Device | None, manifest: Manifest) -> str:
    """`Client device`, and with clients of several devices `Client device paper-p4`."""
    name = device_key(role, device, manifest).removeprefix(role).removeprefix("-")
    return f"{role.capitalize()} device" + (f" {name}" if name else "")


def _device_html(role: str, device: Device | None) -> str:
    if device is None:
        return f"<p>{e(AS_HOST[role].capitalize())}.</p>"
    profile = DeviceProfile.from_dict(device.profile)
    out = [
        kv(
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
            if device.mode == Mode.THROTTLE
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
            shared += f", on client host {e(cal.client)}"
        if cal.reused:
            shared += (
                f"; used again by the session(s) started {', '.join(map(e, cal.reused))} on the same machine"
            )
        out.append(
            f"<h4>Calibration {i} ({e(cal.at)}{shared}): {flagged} of {len(rows)} outside "
            f"{cal.tolerance.describe()}</h4>"
            f'<p class="note">Target: the {role} device\'s time for the work from its profile '
            f"({WORK_OF_ROLE[role]}); achieved: {achieved}. Flagged rows are highlighted; trials of "
            "flagged work are marked emulation_flagged in trials.csv and cells.csv.</p>"
            + table(rows, ["missing" if f else "" for f in rows["flagged"]])
        )
    return "\n".join(out)


def _validation_html(manifest: Manifest | None) -> str:
    if manifest is None or not manifest.validation:
        return "<p>No link validation recorded in the manifest.</p>"
    checks = [{k: v for k, v in asdict(c).items() if v is not None} for c in manifest.validation]
    return records(checks, mark_bad=True)


def _prediction_html(out_dir: Path, embed: bool = True) -> list[str]:
    """The prediction section, only when `analysis.predict` has written its outputs next to the report."""
    validation = out_dir / "prediction_validation.csv"
    if not validation.is_file():
        return []
    parts = [
        '<h2 id="prediction">Prediction</h2>',
        '<p class="note">Per-stage models fitted on this run (<a href="prediction_model.json">parameters</a>, '
        '<a href="prediction.csv">predicted cells</a>); validation refits without each size and each rate and '
        "predicts the held-out cells (lost_s: extra time of following the predicted decisions; uncertain_cells: "
        "cells marked ~, left out of decision_accuracy and lost_s, their measured decision within the "
        "emulation's error).</p>",
        table(pd.read_csv(validation)),
    ]
    for png in sorted(out_dir.glob("prediction-border-*.png")):
        parts.append(f'<figure><img src="{image_src(png, embed)}" alt="{e(png.stem)}"></figure>')
    return parts


def _trial_fidelity_html(fidelity: pd.DataFrame | None) -> list[str]:
    """The devices as the trials kept them: each kind of work's mean used time against its target."""
    if fidelity is None:
        return []
    note = (
        "Per role, kind of work, op, size and method: the device profile's time (target_s) against the mean "
        "of the time the trials used for that stage (mean_s, ± ci95), over every successful trial; flagged "
        "outside the calibration's tolerance. A calibration checks the work in its own process; this checks "
        "it where it counted, inside the trials (analysis/trial_fidelity.py)."
    )
    body = section("", note, fidelity, fidelity["flagged"])
    return [details("The devices in the trials", body, "trial-fidelity")]


def _paper_html(checks: pd.DataFrame | None, plots: list[Plot]) -> list[str]:
    """ "Against the paper": each of its statements, the measured figure, and whether it holds; with links
    to the run's figures in the paper's form (Fig. 5: the penalties section, Fig. 4: the stage bars)."""
    if checks is None:
        return []
    from analysis.paper_checks import ANOMALY, held_out_summary
    from analysis.paper_judges import FAILS

    anomaly = ", ".join(str(n) for n in checks.loc[checks["use"] == ANOMALY, "n"])
    note = (
        'The quantitative statements of section III of "The Effect of Data Marshalling on Computation '
        'Offloading Decisions", judged on this run (analysis/paper_checks.py). <em>held out</em>: the device '
        "profiles were not derived from the statement, so it validates them; the score is how many of them "
        "hold, over all of them. <em>fit</em>: the profiles were derived from it. <em>the paper's anomaly</em> "
        f"({anomaly}): the paper's account of its own abnormal RAW runs, measured and reported, not scored. "
        "<em>reading</em>: where the paper's words admit two readings, the one judged and why. Figures are "
        "means ± the half-width of their 95% CI; a decision statement is undecided when a cell it needs is. "
        "Highlighted: a held-out or fit statement that fails."
    )
    parts = ['<h2 id="paper">Against the paper</h2>', f"<p>{e(held_out_summary(checks))}.</p>"]
    parts += section("", note, checks, (checks["holds"] == FAILS) & (checks["use"] != ANOMALY))
    if figures := [p for p in plots if p.kind == "decisions"]:
        links = " ".join(f'<a href="#fig-{e(p.png.stem)}">{e(p.about[0])}</a>' for p in figures)
        parts.append(f"<p>Offloading counts and cumulative penalties, as the paper's Fig. 5: {links}.</p>")
    if stages := [p for p in plots if p.kind == "stages"]:
        links = " ".join(
            f'<a href="#fig-{e(p.png.stem)}">{e(p.png.stem.removeprefix("stages-"))}</a>' for p in stages
        )
        parts.append(f"<p>Completion time by stage per size, as the paper's Fig. 4: {links}.</p>")
    return parts


def _replicas_html(replicas: pd.DataFrame | None) -> list[str]:
    """A sweep over several testbeds: every test of the replicas' samples, significant ones highlighted."""
    if replicas is None:
        return []
    note = (
        "The replicas compared per cell and quantity (Alexander-Govern test, unequal variances), p adjusted "
        "over all tests with Holm's method; significant: adjusted p below 5%. "
        f"{int(replicas['significant'].sum())} of {len(replicas)} tests significant."
    )
    return [details("Replica effect", section("", note, replicas), "replicas")]


def _contention_html(contention: pd.DataFrame | None, borders: pd.DataFrame | None) -> list[str]:
    """Several clients offloading at once: the border against their number, and every cell's means."""
    if contention is None:
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
        details("Several clients: the decision border", section("", note, borders), "contention-borders"),
        details("Several clients: cells", section("", detail, contention), "contention"),
    ]
