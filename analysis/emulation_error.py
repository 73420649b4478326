"""Each cell's emulation error on its remote - local difference, and whether it could flip the cell's
decision (issue 44, item 3).

A trial's stages each have a target, the device profile's seconds for that work
(`contracts.stage_targets`). A cell's decision rests on the difference d = mean remote - mean local
(`penalty`) against the half-width of its Welch 95% CI (`diff_ci95`). Where the emulation missed its
targets, d is off by the emulation's error on it:

    e = sum over the remote trials' stages with a target of (stage mean - target)
        - (the local baseline's kernel mean - its target)

(the local baseline of the cell's own client device, as `analysis.cells` pairs them), with a 95%
half-width h, the stages' half-widths (`analysis.stats.ci95`) combined in quadrature. Each emulated
stage at its target, the difference would have been d - e; `could_flip` says whether that changes
what the cell shows, judged with the cell's own half-width. h is reported (`emulation_error_ci95`) and
not added to it: h is made of the same trials' noise that the cell's half-width already holds, and
counted twice it marked cells whose error was nothing (measured, the smoke run of 2026-11-27: 5 of
12 cells, the worst an error of -0.02 s +- 1.32 s on a difference of +2.1 s +- 1.31 s, both
half-widths the local baseline's kernel, +-1.4 s over 4 trials). A stage without a target (no device, a server in another language, a
codec the profile does not cover) counts for nothing; a cell none of whose stages has a target has no
error (NaN) and is never uncertain.

`emulation_flagged` (a trial's own stage missed by more than the tolerance) says the emulation erred;
`emulation_uncertain` says whether that error matters for this cell's answer. A stage missed by 30%
that is a millisecond of a ten-second difference does not make a cell uncertain; a stage within
tolerance can, when the cell's margin is smaller still.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.stats import ci95
from contracts.device import DeviceProfile
from contracts.run import Device, Manifest
from contracts.stage_targets import LOCAL_WORK, STAGE_WORK, stage_targets
from contracts.stages import LOCAL, PYTHON, label_server

COLUMNS = ["emulation_error", "emulation_error_ci95", "emulation_uncertain"]
TIMED = [*STAGE_WORK, *LOCAL_WORK]  # every column a target may be of


def could_flip(diff, half, error) -> np.ndarray:
    """Whether correcting a difference `diff` (remote - local, with Welch half-width `half`) by the
    emulation's `error` flips its decision or its undecided state: the issue's "a cell is marked when
    that error could flip its decision or its undecided state", so a decision the emulation alone
    could have made (or unmade) is not read as the device's.

    A decided cell (|diff| > half) is uncertain when the corrected difference comes within `half` of
    zero or crosses it; an undecided one when it leaves the band (|diff - error| > half). A cell
    without a known difference, half-width or error (missing, untested, no target) never is.
    """
    d, band, e = (np.asarray(x, dtype=float) for x in (diff, half, error))
    known = ~(np.isnan(d) | np.isnan(band) | np.isnan(e))
    with np.errstate(invalid="ignore"):
        corrected = d - e
        decided = np.abs(d) > band
        flips = np.where(decided, np.sign(d) * corrected <= band, np.abs(corrected) > band)
    return known & flips


def emulation_error(trials: pd.DataFrame, cells: pd.DataFrame, manifest: Manifest | None) -> pd.DataFrame:
    """Per cell (the rows of `cells`, indexed by op, size, rate and method, with the client `device`,
    `penalty` and `diff_ci95` columns; `trials` with its `device` column too): `emulation_error` (s),
    its `emulation_error_ci95` (NaN where no stage of the cell has a target: no manifest, no device)
    and `emulation_uncertain` (`could_flip`)."""
    out = pd.DataFrame(np.nan, index=cells.index, columns=COLUMNS[:2])
    if manifest is not None and len(cells):
        out[COLUMNS[:2]] = _errors(trials, cells, manifest)
    out["emulation_uncertain"] = could_flip(cells["penalty"], cells["diff_ci95"], out["emulation_error"])
    return out


def _errors(trials: pd.DataFrame, cells: pd.DataFrame, manifest: Manifest) -> list[tuple[float, float]]:
    """Per cell: (its emulation error, the error's 95% half-width), NaN where no stage has a target."""
    good = trials[trials["ok"].astype(bool)]
    timed = [c for c in TIMED if c in good]
    remote = _stats(good[good["method"] != LOCAL], list(cells.index.names), timed)
    local = _stats(good[good["method"] == LOCAL], ["op", "size", "device"], timed)
    targets = _Targets(manifest)
    rows = []
    for (op, size, rate, method), device in zip(cells.index, cells["device"], strict=True):
        away = _deviation(remote, (op, size, rate, method), targets.of(op, size, method, device))
        base = _deviation(local, (op, size, device), targets.of(op, size, LOCAL, device))
        if away is None and base is None:
            rows.append((np.nan, np.nan))
            continue
        (error, var), (base_error, base_var) = away or (0.0, 0.0), base or (0.0, 0.0)
        rows.append((error - base_error, float(np.sqrt(var + base_var))))
    return rows


def _stats(frame: pd.DataFrame, keys: list[str], columns: list[str]) -> dict[tuple, dict[str, tuple]]:
    """Per group of `keys`: each column's (mean, 95% half-width) over its timed rows."""
    out: dict[tuple, dict[str, tuple]] = {}
    for key, group in frame.groupby(keys, sort=False):
        stats = {}
        for column in columns:
            values = group[column].dropna().astype(float)
            if len(values):
                half = float(ci95(values.std(), len(values))) if len(values) > 1 else np.nan
                stats[column] = (float(values.mean()), half)
        out[key] = stats
    return out


def _deviation(stats: dict, key: tuple, targets: dict[str, float]) -> tuple[float, float] | None:
    """(sum of the stages' mean - target, sum of their squared half-widths) over the stages of `key`'s
    trials that have a target and a time; None where none has."""
    measured = stats.get(key, {})
    pairs = [(measured[c], t) for c, t in targets.items() if c in measured]
    if not pairs:
        return None
    return sum(m - t for (m, _), t in pairs), sum(h**2 for (_, h), _ in pairs)


class _Targets:
    """Stage targets per (op, size, method, client device), each device's profile read once."""

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.itemsize = np.dtype(manifest.experiment.dtype).itemsize
        self.profiles: dict[int, DeviceProfile] = {}

    def profile(self, device: Device | None) -> DeviceProfile | None:
        if device is None:
            return None
        if id(device) not in self.profiles:
            self.profiles[id(device)] = DeviceProfile.from_dict(device.profile)
        return self.profiles[id(device)]

    def of(self, op: str, size, method: str, device: str) -> dict[str, float]:
        client = self.profile(self.manifest.client_device(device or None))
        python = method == LOCAL or label_server(method) == PYTHON  # the servers the targets are of
        server = self.profile(self.manifest.server_device) if python else None
        return stage_targets(op, int(size), method, self.itemsize, client, server)


def uncertain_line(cells: pd.DataFrame) -> str | None:
    """The summary's line: how many known cells are `emulation_uncertain`, and the one whose error is
    largest; None where no cell has an error (no stage with a device target)."""
    if "emulation_error" not in cells or cells["emulation_error"].isna().all():
        return None
    known = cells[cells["emulation_error"].notna() & cells["penalty"].notna()]
    chosen = known[known["emulation_uncertain"].astype(bool)]
    line = (
        f"emulation uncertain (~): {len(chosen)} of {len(known)} cells with device targets, the emulation's "
        "error on remote - local could flip their decision or undecided state"
    )
    if chosen.empty:
        return line
    worst = chosen.loc[chosen["emulation_error"].abs().idxmax()]
    return line + f"; worst: {describe(worst)} (analysis/cells.csv)"


def describe(cell: pd.Series) -> str:
    """`mul 400 raw 100 Mbit/s: error -0.0449 s (+-0.142) on a difference of -0.0208 s (+-0.0931)`."""
    return (
        f"{cell['op']} {cell['size']} {cell['method']} {cell['rate_mbps']:g} Mbit/s: error "
        f"{cell['emulation_error']:+.3g} s (+-{cell['emulation_error_ci95']:.3g}) on a difference of "
        f"{cell['penalty']:+.3g} s (+-{cell['diff_ci95']:.3g})"
    )
