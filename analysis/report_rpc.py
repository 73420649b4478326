"""An RPC study's `report.html` and analysis (`analysis.rpc_study`): its findings first, the figures in
the lightweight-RPC study's form, its figures beside ours, the tables, and the run's metadata."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import pandas as pd

from analysis.plots import Plot
from analysis.report_html import details, e, figure, figures, flatten, kv, table, write_page
from analysis.rpc_plots import rpc_figures
from analysis.rpc_study import (
    CELLS_FILE,
    RATIOS_FILE,
    STUDY_FILE,
    findings,
    headlines,
    rpc_cells,
    rpc_ratios,
    study_table,
)
from contracts.run import Manifest

HOST_SPEED = (
    "The calls ran at host speed: no device was emulated (an RPC study's client runs outside the "
    "device's CPU limit, and its servers as this host's), so the times are this machine's, not a "
    "slow device's. Bytes per call on the wire are what the appliance's ports sent while a batch ran, "
    "over its calls and its one untimed first call."
)
NOTE = (
    "A panel per link, a line per transport and server (tagless solid, gRPC dashed), with 95% CIs "
    "over the trials; the time of 1000 calls is a call's mean time times 1000, whatever the batch's "
    "calls. (d): bytes per call both ways, on the wire (solid) and as framed messages (dotted)."
)
STUDY_NOTE = (
    "The study's ratios are its HPRPC's time over gRPC's (C#, its own implementations, a LAN); ours "
    "are tagless's over gRPC's. 'why' splits gRPC's extra time per call into what was measured: its "
    "server's CPU, its extra bytes at the link's rate, and the rest, the client's side and the "
    "transport (protobuf's marshalling in Python, HTTP/2's frames, grpcio's per-call work)."
)


SERIALIZED = {
    True: "Each packet crossed the shaped link held for its bytes at the rate (netem's rate beside HTB), "
    "so no message crossed faster than a line of the rate would carry it.",
    False: "The appliance's kernel had no netem: the links were shaped by HTB alone (a burst of two "
    "frames), so a message's first packets may have crossed faster than the rate.",
}


def links_note(manifest: Manifest | None) -> str | None:
    """How the study's links were shaped, as its sessions recorded it (`Session.serialized`); None for a
    run from before it was recorded."""
    kinds = {s.serialized for s in manifest.sessions} if manifest is not None else set()
    if None in kinds or not kinds:
        return None
    if len(kinds) > 1:
        return "The sessions differ: " + " ".join(
            f"{'some' if k else 'others'}: {SERIALIZED[k]}" for k in (True, False)
        )
    return SERIALIZED[kinds.pop()]


def write_rpc_report(
    path: Path,
    run_id: str,
    summary: str,
    tables: dict,
    plots: list[Plot],
    manifest: Manifest | None,
    embed: bool = True,
) -> Path:
    lines = summary.splitlines()
    every = [line for line in lines[1:] if " per call " in line]  # a line per operation, server, link
    others = [line for line in lines[1:] if line not in every]
    parts = [
        f"<h1>RPC study: {e(run_id)}</h1>",
        f'<p class="lead">{e(lines[0])}</p>',
        "<ul>" + "".join(f"<li>{e(line)}</li>" for line in [*headlines(tables["ratios"]), *others]) + "</ul>",
        f'<p class="note">{e(HOST_SPEED)}</p>',
        *([f'<p class="note">{e(note)}</p>'] if (note := links_note(manifest)) else []),
        details(
            "Every ratio, per operation, server and link",
            "<ul>" + "".join(f"<li>{e(x)}</li>" for x in every) + "</ul>",
            "every-ratio",
        ),
        '<h2 id="figures">Fig. 9, measured here</h2>',
        f'<p class="note">{e(NOTE)}</p>',
        figures([figure(p, embed=embed) for p in plots], large=True),
        '<h2 id="study">Against the lightweight-RPC study</h2>',
        f'<p class="note">{e(STUDY_NOTE)}</p>',
        f'<div class="wide">{table(tables["study"])}</div>',
        '<h2 id="details">Details</h2>',
        details(
            f"Tagless against gRPC, every cell ({RATIOS_FILE})",
            [f'<div class="wide">{table(tables["ratios"])}</div>'],
            "ratios",
        ),
        details(
            f"Every cell: time and bytes per call ({CELLS_FILE})",
            [f'<div class="wide">{table(tables["cells"])}</div>'],
            "cells",
        ),
    ]
    if manifest is not None:
        parts.append(details("Experiment", kv(flatten(manifest.experiment.as_dict())), "experiment"))
    return write_page(path, f"RPC study: {run_id}", parts)


def rpc_tables(trials: pd.DataFrame) -> dict[str, pd.DataFrame]:
    cells = rpc_cells(trials)
    ratios = rpc_ratios(cells)
    return {"cells": cells, "ratios": ratios, "study": study_table(ratios)}


def analyze_rpc(run, out_dir: Path, plots: bool, out: TextIO | None, embed: bool) -> Path:
    """The RPC run's analysis: rpc_cells.csv, rpc_ratios.csv, rpc_vs_study.csv, its figures and
    report.html, and the summary."""
    tables = rpc_tables(run.trials)
    for name, file in (("cells", CELLS_FILE), ("ratios", RATIOS_FILE), ("study", STUDY_FILE)):
        tables[name].to_csv(out_dir / file, index=False, float_format="%.6g")
    for old in out_dir.glob("rpc-fig9*"):
        old.unlink()
    figures_ = rpc_figures(tables["cells"], out_dir) if plots else []
    run_id = (run.manifest.run_id if run.manifest else None) or run.run_dir.name
    cells = tables["cells"]
    kept = int(cells["n"].sum()) if not cells.empty else 0
    head = (
        f"RPC study {run_id}: {kept} batch(es) kept of {len(run.trials)}, {len(cells)} cell(s), at host "
        f"speed (analysis/{CELLS_FILE}, {RATIOS_FILE}, {STUDY_FILE})"
    )
    summary = "\n".join([head, *findings(cells, tables["ratios"])])
    write_rpc_report(out_dir / "report.html", run_id, summary, tables, figures_, run.manifest, embed)
    print(summary, file=out or sys.stdout)
    return out_dir
