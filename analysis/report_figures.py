"""The report's figures, in the order a results section reads: where offloading pays (a decision map per
op and method), where the time goes (stage bars per size), what each method costs over all rates
(cumulative penalties); then the other figures. Each figure comes with a sentence saying what it shows,
computed from the data it draws (`analysis.report_findings`).
"""

from __future__ import annotations

import pandas as pd

from analysis.devices import server_stage_note
from analysis.plots import Plot
from analysis.report_findings import (
    map_finding,
    most_offloading,
    of_stage_figure,
    penalty_finding,
    stage_finding,
)
from analysis.report_html import details, e, figure, figures, section
from contracts.run import Manifest

# the other figures, after the results: their heading and what each shows (a description, no finding)
MORE = {
    "ratios": (
        "Ratios",
        "Per size and rate, each method's share of marshalling in its completion time and its completion "
        "time against JSON's.",
    ),
    "servers": (
        "gRPC servers by language",
        "Each gRPC server's decode, compute and encode per size, averaged over the rates.",
    ),
    "delay": (
        "Delay and loss",
        "Per size and rate, the completion time against the round trip the delay adds (twice the one-way "
        "delay), a line per method and loss; a filled marker where offloading pays; the local time dashed.",
    ),
    "contention": (
        "Several clients offloading at once",
        "Per size and rate, the completion time, communication and server queueing against the number of "
        "clients offloading at once.",
    ),
}
NO_PLOTS = "<p>Plots were not made (analysis run without plots).</p>"


def _ops(cells: pd.DataFrame) -> list[str]:
    return sorted(map(str, cells["op"].unique()))


def results_html(
    plots: list[Plot], tables: dict[str, pd.DataFrame], manifest: Manifest | None, embed: bool
) -> list[str]:
    """The three results sections: decision maps, stage bars, cumulative penalties."""
    return [
        *_maps_html(plots, tables["cells"], embed),
        *_stages_html(plots, tables["cells"], manifest, embed),
        *_penalties_html(plots, tables["cumulative_penalty"], embed),
    ]


def _maps_html(plots: list[Plot], cells: pd.DataFrame, embed: bool) -> list[str]:
    """Per op, which method offloads in most cells, and its decision map per method."""
    parts = ['<h2 id="decisions">Where offloading pays</h2>']
    for op in _ops(cells):
        parts.append(f"<p>{most_offloading(cells, op)}</p>")
        maps = [p for p in plots if p.kind == "map" and p.about[:1] == (op,)]
        chosen = [
            figure(p, map_finding(cells[(cells["op"] == op) & (cells["method"] == p.about[1])]), embed)
            for p in maps
        ]
        if chosen:
            parts.append(figures(chosen))
    if not any(p.kind == "map" for p in plots):
        return [*parts, NO_PLOTS if not plots else ""]
    parts.append(
        '<p class="note">A decision map: per size and rate, whether the mean remote completion time is '
        "significantly below the local one (offload) or above it (stay local) in Welch's test at 95%, not "
        "significantly different (undecided) or unknown (missing), as its legend shows; each cell holds its "
        "penalty, mean remote - mean local (s), followed by ~ where the emulation's error on that difference "
        "could flip the cell's decision or undecided state (emulation_uncertain: not counted as a decision "
        "in the sentences).</p>"
    )
    return parts


def _stages_html(plots: list[Plot], cells: pd.DataFrame, manifest: Manifest | None, embed: bool) -> list[str]:
    """The stage bars of each op and size (the paper's Fig. 4), each with the local time and the
    fastest offload."""
    stages = [p for p in plots if p.kind == "stages"]
    if not stages:
        return []
    parts = [
        '<h2 id="stages">Where the time goes: completion time by stage (Fig. 4)</h2>',
        f'<p class="note">{e(server_stage_note(manifest))} The dashed line is the local completion time: '
        "offloading pays where a bar ends below it.</p>",
    ]
    for op in _ops(cells):
        mine = [p for p in stages if p.about[:1] == (op,)]
        parts.append(f"<h3>{e(op)}</h3>")
        parts.append(
            figures([figure(p, stage_finding(of_stage_figure(cells, *p.about)), embed) for p in mine], True)
        )
    return parts


def _penalties_html(plots: list[Plot], penalties: pd.DataFrame, embed: bool) -> list[str]:
    """Per op, the offloading counts and cumulative penalties per size (the paper's Fig. 5)."""
    chosen = [p for p in plots if p.kind == "decisions"]
    if not chosen:
        return []
    return [
        '<h2 id="penalties">Over all rates: offloading counts and cumulative penalties (Fig. 5)</h2>',
        '<p class="note">Per size and method: the number of rates where offloading pays (top) and the '
        "cumulative penalty, the sum over the rates of mean remote - mean local (bottom; below 0 offloading "
        "saves time over all rates).</p>",
        figures([figure(p, penalty_finding(penalties, p.about[0]), embed) for p in chosen], True),
    ]


def more_figures_html(plots: list[Plot], embed: bool) -> list[str]:
    """The figures the results sections do not show (ratios, servers, contention), each kind with what
    its figures show."""
    parts = []
    for kind, (title, shows) in MORE.items():
        if chosen := [p for p in plots if p.kind == kind]:
            parts += [
                f"<h3>{e(title)}</h3>",
                f"<p>{e(shows)}</p>",
                figures([figure(p, "", embed) for p in chosen], True),
            ]
    return ['<h2 id="plots">More figures</h2>', *parts] if parts else []


def fidelity_figures_html(plots: list[Plot], embed: bool) -> str:
    """Each emulated device's last calibration, target against achieved per kind of work."""
    chosen = [p for p in plots if p.kind == "fidelity"]
    if not chosen:
        return ""
    shows = (
        "The device's time for each kind of work (dashed) against what the emulation achieved in its last "
        "calibration (left), and the error against the tolerance band (right; x: flagged)."
    )
    return figures([figure(p, e(shows), embed) for p in chosen], True)


def delay_html(tables: dict[str, pd.DataFrame]) -> list[str]:
    """The report's part: the decisions against the round trip, and every point's cells."""

    if "delay_cells" not in tables:
        return []
    note = (
        "Per cell and loss, the decision at each round trip the delay adds (twice the one-way delay; the "
        "link's own is not in it), ascending: 1 offloading pays, 0 it does not, ? undecided, - missing."
    )
    detail = "Each row: the cell's trials at one point of the link (rate, delay, loss), against the local baseline."
    return [
        details("Delay and loss: decisions", section("", note, tables["delay_decisions"]), "delay-decisions"),
        details("Delay and loss: cells", section("", detail, tables["delay_cells"]), "delay-cells"),
    ]
