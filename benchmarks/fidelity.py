"""The device emulation's worst stage against the device tolerance, measured on the shipped check run.

The run is `reproductions/fidelity-check/` (`experiments/fidelity-check.yaml` on 4 testbeds: mul, inv
and log at 400 and 1200; JSON, uJSON, RAW and gRPC; both of the paper's devices; the cgi stack). Per
role and kind of work, the trials' mean stage time against the device's target
(`analysis.trial_fidelity`, as the run's report has it); the figure is the worst kind of work's miss
over what the tolerance allows it (`DeviceTolerance.allowed_s`, max(10%, 0.1 ms) unless the
experiment said otherwise): at most 1, every kind of work within its tolerance. The note adds the
share of trials marked `emulation_flagged` (one of their own stages outside the tolerance).

Nothing here runs a sweep (a calibration and 100-odd trials take a quarter of an hour): the row reads
what the shipped run recorded, so it costs nothing in `--quick` and says `skipped` (with the reason)
until a run ships. Run the check again after any change to the emulation and ship it.
"""

from __future__ import annotations

from pathlib import Path

from analysis.load import load_run
from analysis.trial_fidelity import tolerance, trial_fidelity
from benchmarks.common import Row, skipped
from contracts.errors import UserError

SECTION = "runs"
RUN = Path(__file__).resolve().parent.parent / "reproductions" / "fidelity-check"
FIGURE = "worst stage's miss / device tolerance"
CASE = "fidelity-check"
TARGET = ("<=", 1.0)


def row(run_dir: Path = RUN) -> Row:
    """The figure from a run's trials and manifest; `skipped` when there is no run or it cannot say."""
    if not (run_dir / "manifest.json").is_file():
        return skipped(SECTION, FIGURE, CASE, "x", f"no shipped run ({run_dir} not found)", TARGET)
    try:
        run = load_run(run_dir)
    except UserError as exc:
        return skipped(SECTION, FIGURE, CASE, "x", str(exc), TARGET)
    table = trial_fidelity(run.trials, run.manifest)
    if run.manifest is None or table.empty:
        return skipped(SECTION, FIGURE, CASE, "x", f"{run_dir}: no device's stage to check", TARGET)
    manifest = run.manifest
    devices = {"client": manifest.device, "server": manifest.server_device}
    allowed = [
        tolerance(devices[r.role], manifest.experiment.device_tolerance).allowed_s(r.target_s)
        for r in table.itertuples()
    ]
    ratio = (table["mean_s"] - table["target_s"]).abs() / allowed
    worst = table.loc[ratio.idxmax()]
    ok = run.trials[run.trials["ok"].astype(bool)]
    flagged = int(ok["emulation_flagged"].astype(bool).sum())
    stated = manifest.experiment.device_tolerance.describe()
    return Row(
        SECTION,
        FIGURE,
        CASE,
        float(ratio.max()),
        "x",
        TARGET,
        note=f"worst: {worst['role']} {worst['op']} {worst['size']} {worst['method']} {worst['work']} "
        f"{worst['error_pct']:+.1f}% within {stated}; {int(table['flagged'].sum())} of {len(table)} kinds "
        f"of work outside; {flagged} of {len(ok)} trials emulation_flagged ({100 * flagged / len(ok):.1f}%)",
        details={
            "run_id": manifest.run_id,
            "kinds_of_work": len(table),
            "kinds_outside": int(table["flagged"].sum()),
            "trials": len(ok),
            "trials_flagged": flagged,
            "worst": {k: (v.item() if hasattr(v, "item") else v) for k, v in worst.items()},
        },
    )


def run(quick: bool = False, progress=print) -> list[Row]:
    return [row()]


def cases(quick: bool) -> list[tuple[str, str, str, tuple | None]]:
    return [(FIGURE, CASE, "x", TARGET)]
