"""A transfer run's `report.html` (`analysis.transfers`): the effects in words, the figures in the
energy study's form, the table, and the run's metadata, on one self-contained page."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import pandas as pd

from analysis.plots import Plot
from analysis.report_html import details, e, figure, figures, flatten, kv, table, write_page
from analysis.transfer_plots import transfer_figures
from analysis.transfers import FILE, baseline, effect_lines, transfer_table
from contracts.power import Power
from contracts.run import Manifest

NOTE = (
    "Each setting varied with the others held at {held}; a line per dataset, with 95% CIs over the "
    "repetitions. Throughput: the dataset's bytes over the fetch's seconds. Energy per 100 MB: the client "
    "device's radio power figures times the fetch's seconds, over its bytes (a model: it follows "
    "1/throughput by construction; docs/transfers.md)."
)


def write_transfer_report(
    path: Path,
    run_id: str,
    summary: str,
    frame: pd.DataFrame,
    plots: list[Plot],
    manifest: Manifest | None,
    embed: bool = True,
) -> Path:
    held = ", ".join(f"{k} {v}" for k, v in baseline(frame).items())
    lines = summary.splitlines()
    parts = [
        f"<h1>Transfer analysis: {e(run_id)}</h1>",
        f'<p class="lead">{e(lines[0])}</p>',
        "<ul>" + "".join(f"<li>{e(line)}</li>" for line in lines[1:]) + "</ul>",
        '<h2 id="figures">Throughput and energy against each setting</h2>',
        f'<p class="note">{e(NOTE.format(held=held))}</p>',
        figures([figure(p, embed=embed) for p in plots], large=True),
        '<h2 id="details">Details</h2>',
        details(f"Every setting ({FILE})", [f'<div class="wide">{table(frame)}</div>'], "transfers"),
    ]
    if manifest is not None:
        parts.append(details("Experiment", kv(flatten(manifest.experiment.as_dict())), "experiment"))
    return write_page(path, f"Transfer analysis: {run_id}", parts)


def analyze_transfers(run, power: Power | None, out_dir: Path, plots: bool, out: TextIO | None, embed: bool):
    """The transfer run's analysis: transfers.csv, its figures and report.html, and the summary."""
    table = transfer_table(run.trials, power)
    table.to_csv(out_dir / FILE, index=False, float_format="%.6g")
    for old in out_dir.glob("transfers-*"):
        old.unlink()
    figures = transfer_figures(table, out_dir) if plots else []
    run_id = (run.manifest.run_id if run.manifest else None) or run.run_dir.name
    failed = int(table["failed"].sum())
    summary = "\n".join(
        [
            f"transfer run {run_id}: {int(table['n'].sum())} fetch(es) ok, {failed} failed, "
            f"{len(table)} setting(s) of {table['dataset'].nunique()} dataset(s) (analysis/{FILE})",
            *effect_lines(table),
            *([] if power is not None else ["no power figures: no energy (give the run a client_device)"]),
        ]
    )
    write_transfer_report(out_dir / "report.html", run_id, summary, table, figures, run.manifest, embed)
    print(summary, file=out or sys.stdout)
    return out_dir
