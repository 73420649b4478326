"""Which trials ran while the host was slow: the sweep's record of the host's speed (`host_speed.csv`,
`testbed.sweep.host_speed`) against each trial's span.

A trial is `emulation_flagged` when one of its stages missed its device's target by more than the
tolerance; on a host whose speed comes and goes in spells the stage's CPU time moves with the spell,
whatever the emulation does (`contracts.steadiness`). The record says which: each successful trial
ran on a `slow` host when any probe during it took more than the tolerance's percent above the
record's fastest, on a `steady` one when its probes were all within it, `unrecorded` when no probe
fell in its span (a short trial between two probes). The table counts trials and flagged trials for
each, and the probes they saw; its last row is the whole record's. A run without the record (an SSH
lab's, or one before it existed) has no table.

A trial's span is from its `started_at` (taken just before its first timed stage) for its measured
wall time (the client's stages and the request; a local trial's whole run) and `MARGIN_S` more, for
the stages' work timed again and the trial's bookkeeping, which happen on the same host.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from contracts.stages import LOCAL
from contracts.steadiness import HOST_SPEED_FILE, UNSTEADY_SHARE

MARGIN_S = 0.5
STEADY, SLOW, UNRECORDED, RECORD = "steady", "slow", "unrecorded", "the whole record"


def read_host_speed(run_dir: Path) -> pd.DataFrame | None:
    """The record's probes (`at`: Unix seconds, `probe_ms`), in time order; None without a record.
    A line the recorder was ended in the middle of (no newline yet) is left out."""
    path = Path(run_dir) / HOST_SPEED_FILE
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    rows = []
    for line in lines[1:-1]:  # the last: empty after a whole line, or one the recorder was ended in
        parts = line.split(",")
        try:
            at, ms = (float(p) for p in parts) if len(parts) == 2 else (math.nan, math.nan)
        except ValueError:
            continue
        if math.isfinite(at) and math.isfinite(ms) and ms > 0:
            rows.append((at, ms))
    return pd.DataFrame(rows, columns=["at", "probe_ms"]).sort_values("at") if rows else None


def trial_spans(trials: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each trial's span in Unix seconds (start, end); NaN where it has no start."""
    start = pd.to_datetime(trials["started_at"], utc=True, errors="coerce", format="ISO8601")
    start_s = (start - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()  # NaN: no start
    local = trials["method"] == LOCAL
    encode = trials["wall_client_encode"].fillna(trials["t_client_encode"])
    decode = trials["wall_client_decode"].fillna(trials["t_client_decode"])
    remote = (encode.fillna(0.0) + trials["t_request"].fillna(0.0) + decode.fillna(0.0)).to_numpy()
    whole = trials["wall_total"].fillna(trials["t_total"]).fillna(0.0).to_numpy()
    wall = np.where(local.to_numpy(), whole, remote)
    return start_s, start_s + wall + MARGIN_S


def host_speed_table(trials: pd.DataFrame, probes: pd.DataFrame | None, slow_pct: float) -> pd.DataFrame:
    """Per state of the host (steady, slow, unrecorded): the successful trials, how many were flagged,
    and the probes during them (a probe in several trials' spans counts in each); then the whole
    record's probes. Empty without a record."""
    if probes is None or probes.empty:
        return pd.DataFrame()
    ok = trials[trials["ok"].astype(bool)]
    at, ms = probes["at"].to_numpy(), probes["probe_ms"].to_numpy()
    slow_probe = ms > ms.min() * (1 + slow_pct / 100)
    start, end = trial_spans(ok)
    first = np.searchsorted(at, np.nan_to_num(start, nan=np.inf), side="left")
    last = np.searchsorted(at, np.nan_to_num(end, nan=-np.inf), side="right")
    seen = np.maximum(last - first, 0)
    cumulative = np.concatenate([[0], np.cumsum(slow_probe)])
    slow_seen = np.where(seen > 0, cumulative[np.minimum(last, len(at))] - cumulative[first], 0)
    state = np.where(seen == 0, UNRECORDED, np.where(slow_seen > 0, SLOW, STEADY))
    flagged = ok["emulation_flagged"].astype(bool).to_numpy()
    rows = [
        _row(name, int((state == name).sum()), int(flagged[state == name].sum()),
             int(seen[state == name].sum()), int(slow_seen[state == name].sum()))
        for name in (STEADY, SLOW, UNRECORDED)
    ]  # fmt: skip
    rows.append(_row(RECORD, len(ok), int(flagged.sum()), len(ms), int(slow_probe.sum())))
    table = pd.DataFrame(rows)
    table["fastest_ms"], table["slowest_ms"] = float(ms.min()), float(ms.max())
    table["slow_above_pct"] = slow_pct  # a probe this far above the fastest is slow
    return table


def _row(host: str, trials: int, flagged: int, probes: int, slow: int) -> dict:
    return {
        "host": host,
        "trials": trials,
        "flagged": flagged,
        "flagged_pct": 100 * flagged / trials if trials else math.nan,
        "probes": probes,
        "slow_probes": slow,
        "slow_pct": 100 * slow / probes if probes else math.nan,
    }


def host_speed_lines(table: pd.DataFrame) -> list[str]:
    """The summary's line: the record's share of slow probes, and the flagged trials on a steady host
    and on a slow one (the first says what the emulation did where the host let it)."""
    if table.empty:
        return []
    by = table.set_index("host")
    whole = by.loc[RECORD]
    state = "unsteady" if whole["slow_probes"] > UNSTEADY_SHARE * whole["probes"] else "steady"
    parts = [
        f"{by.loc[name, 'flagged']:.0f} of {by.loc[name, 'trials']:.0f} on a {name} host"
        for name in (STEADY, SLOW)
        if by.loc[name, "trials"]
    ]
    flagged = f"; trials flagged: {', '.join(parts)}" if parts else ""
    return [
        f"host speed through the sweep {state}: {whole['slow_pct']:.0f}% of {whole['probes']:.0f} probes "
        f"slow{flagged} (analysis/host_speed.csv)"
    ]
