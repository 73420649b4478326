"""Analysis of a run: reads only `trials.csv` and `manifest.json`, writes `RUN_DIR/analysis/`.

Stages, one module each: load (read and check) -> cells (per-cell statistics against the local
baseline) -> decisions (decision and cumulative penalty vectors) -> tables (CSVs), plots, report
(HTML) and summary (terminal).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # `import analysis` stays light: pandas and matplotlib load when `analyze` runs
    from analysis.load import Run
    from contracts.power import Power

__all__ = ["analyze"]


def analyze(
    run_dir: Path,
    *,
    plots: bool = True,
    out: TextIO | None = None,
    power: Path | None = None,
    embed: bool = True,
) -> Path:
    """Analyse the run in `run_dir`; returns the analysis directory and prints the summary to `out`
    (default: standard output).

    Energy (`analysis.energy`) uses the power figures in `power` (a file with a `power:` section), or
    else those of the run's device profile (of each device's, with clients of several devices: then a
    `power` file, one device's figures, is refused); a run with neither has no energy view. `embed`: the
    report carries its figures (else it links the PNGs beside it: `analysis.report.write_report`).

    Raises UserError for anything the user can fix in the run's files. Figures of an earlier analysis
    are removed even with `plots=False`, so no figure disagrees with the tables next to it.
    """
    from contracts.run import TRIALS_FILE
    from contracts.tasks import TASKS_FILE

    if (Path(run_dir) / TASKS_FILE).is_file() and not (Path(run_dir) / TRIALS_FILE).is_file():
        from analysis.online import analyze_stream  # a stream run (testbed stream): its own analysis

        return analyze_stream(run_dir)
    from analysis.energy import given_powers, run_powers
    from analysis.load import load_run, output_dir
    from analysis.plots import make_plots, remove_plots
    from analysis.report import write_report
    from analysis.report_rpc import analyze_rpc
    from analysis.report_transfers import analyze_transfers
    from analysis.rpc_study import is_rpc_run
    from analysis.tables import write_tables
    from analysis.transfers import is_transfer_run
    from contracts.power import load_power
    from contracts.run import MANIFEST_FILE

    run = load_run(Path(run_dir))
    figures_of = (
        given_powers(load_power(power), run.trials)
        if power
        else run_powers(run.manifest, run.trials, run.run_dir / MANIFEST_FILE)
    )
    out_dir = output_dir(run)
    if is_transfer_run(run.trials):  # a transfer sweep (op fetch): its own tables, figures and page
        return analyze_transfers(run, figures_of.get(""), out_dir, plots, out, embed)
    if is_rpc_run(run.trials):  # an RPC study (issue 46): its own tables, figures and page
        return analyze_rpc(run, out_dir, plots, out, embed)
    tables = _tables(run, figures_of)
    write_tables(tables, out_dir)
    remove_plots(out_dir)
    figures = []
    if plots:
        figures = make_plots(
            tables["cells"],
            tables["decision_vectors"],
            tables["cumulative_penalty"],
            out_dir,
            manifest=run.manifest,
            contention=tables.get("contention"),
            delays=tables.get("delay_cells"),
        )
    run_id = (run.manifest.run_id if run.manifest else None) or _run_id(run.trials) or run.run_dir.name
    summary = _summary(run_id, run, tables)
    write_report(
        out_dir / "report.html",
        run_id=run_id,
        summary=summary,
        manifest=run.manifest,
        tables=tables,
        plots=figures,
        power=figures_of,
        embed=embed,
    )
    print(summary, file=out or sys.stdout)
    return out_dir


def _tables(run: Run, figures_of: dict[str, Power]) -> dict:
    """The run's tables by name, each written as NAME.csv: the cells and their decision vectors and
    penalties always; the rest where the run has what they need. With power figures (`figures_of`)
    the cells gain their energy columns, and the energy's vectors and penalties join."""
    from analysis.cells import cell_table
    from analysis.contention import borders, contention_table, has_contention
    from analysis.decisions import cumulative_penalties, decision_vectors
    from analysis.energy import as_decision_cells, energy_cells
    from analysis.host_speed import host_speed_table, read_host_speed
    from analysis.link_counters import link_counters
    from analysis.link_delay import delay_decisions, delay_table
    from analysis.load import at_point, main_point
    from analysis.paper_checks import judged, paper_checks
    from analysis.replicas import has_replicas, replica_effect
    from analysis.trial_fidelity import trial_fidelity
    from contracts.tolerance import DEFAULT

    # a run that varies delay or loss: the tables against the rate are of its first point (no cell is
    # pooled across points), every point's are against the round trip (`analysis.link_delay`)
    trials = at_point(run.trials, point := main_point(run.trials))
    cells = cell_table(trials, run.manifest)
    tables = {
        "cells": cells,
        "decision_vectors": decision_vectors(cells),
        "cumulative_penalty": cumulative_penalties(cells),
        "link_counters": link_counters(run.trials, run.manifest),
    }
    if not (
        fidelity := trial_fidelity(run.trials, run.manifest)
    ).empty:  # the devices, as the trials kept them
        tables["trial_fidelity"] = fidelity
    pct = run.manifest.experiment.device_tolerance.pct if run.manifest else DEFAULT.pct
    if not (speed := host_speed_table(run.trials, read_host_speed(run.run_dir), pct)).empty:
        tables["host_speed"] = speed  # the sweep's record of the host's speed, against its trials
    if judged(checks := paper_checks(cells)):  # the paper's grid, or part of it: its statements
        tables["paper_checks"] = checks
    if has_replicas(run.trials):  # a sweep over several testbeds: did they measure alike?
        tables["replica_effect"] = replica_effect(run.trials)
    if point is not None:
        cells = tables["cells"] = cells.assign(delay_ms=point[0], loss_pct=point[1])
        tables["delay_cells"] = delay_table(run.trials, run.manifest)
        tables["delay_decisions"] = delay_decisions(tables["delay_cells"])
    if figures_of:
        cells = tables["cells"] = energy_cells(cells, trials, figures_of)
        tables["decision_vectors_energy"] = decision_vectors(as_decision_cells(cells))
        tables["cumulative_penalty_energy"] = cumulative_penalties(as_decision_cells(cells))
    if has_contention(run.trials):  # several clients at once: the border against their number
        tables["contention"] = contention_table(trials, cells)
        tables["contention_borders"] = borders(tables["contention"])
    return tables


def _summary(run_id: str, run: Run, tables: dict) -> str:
    """What the terminal shows (and the report's top): the decisions, then a line or a block for each
    optional table that has something to say."""
    from analysis.contention import contention_lines
    from analysis.devices import steadiness_lines
    from analysis.host_speed import host_speed_lines
    from analysis.link_delay import delay_lines
    from analysis.paper_checks import held_out_summary
    from analysis.replicas import replica_summary
    from analysis.summary import summary_text
    from analysis.trial_fidelity import fidelity_lines

    summary = summary_text(
        run_id,
        run.trials,
        tables["cells"],
        tables["decision_vectors"],
        tables["cumulative_penalty"],
        run.manifest,
    )
    if "trial_fidelity" in tables:
        summary += "\n" + "\n".join(fidelity_lines(tables["trial_fidelity"]))
    if unsteady := steadiness_lines(run.manifest):
        summary += "\n" + "\n".join(unsteady)
    if "host_speed" in tables:
        summary += "\n" + "\n".join(host_speed_lines(tables["host_speed"]))
    if "contention" in tables:
        summary += "\n" + "\n".join(contention_lines(tables["contention"]))
    if "delay_decisions" in tables:
        summary += "\n" + "\n".join(delay_lines(tables["delay_decisions"], tables["cells"]))
    if (replicas := replica_summary(tables.get("replica_effect"), run.trials)) is not None:
        summary += "\n" + replicas
    if "paper_checks" in tables:
        summary += (
            f"\nagainst the paper: {held_out_summary(tables['paper_checks'])} (analysis/paper_checks.csv)"
        )
    return summary


def _run_id(trials) -> str | None:
    ids = [i for i in trials.get("run_id", []) if i]
    return ids[0] if ids else None
