"""The analysis CSVs: what other tools (and the paper's tables) read, so their columns are fixed here.

Unknown values are empty fields, never 0; flags are `true`/`false` like `ok` in trials.csv.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from contracts.stages import STAGES

CELL_COLUMNS = [
    "op",
    "size",
    "rate_mbps",
    "method",
    "n",
    "failed",
    "n_trials",
    "stop_reason",
    "missing",
    "mean",
    "ci95",
    "local_n",
    "local_mean",
    "local_ci95",
    "offload",
    "significant",
    "diff_ci95",
    "welch_dof",
    "penalty",
    "marshalling_ratio",
    "json_ratio",
    "emulation_flagged",
    "emulation_error",
    "emulation_error_ci95",
    "emulation_uncertain",
    "energy_local_j",
    "energy_remote_j",
    "energy_ci95",
    "energy_offload",
    "energy_penalty_j",
    *(f"{stage}_{what}" for stage in STAGES for what in ("mean", "ci95")),
]
# a cgi run's cells also have these (a run without a server start-up stage has no such columns, so
# the tables of earlier runs stay as they were): the start-up, and communication without it
CGI_COLUMNS = [f"{c}_{what}" for c in ("t_server_start", "t_comm_net") for what in ("mean", "ci95")]
FILES = {
    "cells": "cells.csv",
    "decision_vectors": "decision_vectors.csv",
    "cumulative_penalty": "cumulative_penalty.csv",
    "link_counters": "link_counters.csv",
    "decision_vectors_energy": "decision_vectors_energy.csv",
    "cumulative_penalty_energy": "cumulative_penalty_energy.csv",
    "replica_effect": "replica_effect.csv",
    "paper_checks": "paper_checks.csv",
    "trial_fidelity": "trial_fidelity.csv",
    "contention": "contention.csv",
    "contention_borders": "contention_borders.csv",
    "delay_cells": "delay_cells.csv",
    "delay_decisions": "delay_decisions.csv",
    "host_speed": "host_speed.csv",
}


def cell_columns(cells: pd.DataFrame) -> list[str]:
    """CELL_COLUMNS, with the client device after the method when the run's clients were of several
    devices (a run of one device has no such column, so its tables stay as they were), and the delay
    and loss after the rate when the run varies them."""
    columns = list(CELL_COLUMNS)
    if "delay_ms" in cells:  # a run that varies delay or loss: the point its tables against the rate are of
        at = columns.index("rate_mbps") + 1
        columns[at:at] = ["delay_ms", "loss_pct"]
    if "device" not in cells or not (cells["device"].fillna("") != "").any():
        return columns
    at = columns.index("method") + 1
    return [*columns[:at], "device", *columns[at:]]


def csv_frame(frame: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """Flags as true/false and unknowns as empty, in the given column order."""
    out = (frame[columns] if columns else frame).copy()
    for column in out.columns:
        if out[column].dtype in ("bool", "boolean"):
            out[column] = (
                out[column].map(lambda v: "" if pd.isna(v) else ("true" if v else "false")).astype(object)
            )
        elif out[column].dtype == "Int64":  # to_html would print <NA>
            out[column] = out[column].map(lambda v: "" if pd.isna(v) else str(v)).astype(object)
    return out


def write_tables(tables: dict[str, pd.DataFrame], out_dir: Path) -> dict[str, Path]:
    paths = {}
    for name, filename in FILES.items():
        path = out_dir / filename
        if name not in tables:  # e.g. no energy view without power figures: no stale file either
            path.unlink(missing_ok=True)
            continue
        frame = tables[name]
        columns = None
        if name == "cells":  # every column, empty where the run has no such view
            columns = cell_columns(frame) + [c for c in CGI_COLUMNS if c in frame]
            frame = frame.reindex(columns=columns)
        csv_frame(frame, columns).to_csv(path, index=False, na_rep="", float_format=None)
        paths[name] = path
    return paths
