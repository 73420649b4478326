"""The shipped reproduction's run against the one-testbed estimate: what replicas and the stopping rule
save on the paper's grid, measured on the run itself.

The run is `reproductions/marshalling-paper/` (its `manifest.json`): the sweep recorded, before its
first session, the grid's duration on one testbed at every cell's most repetitions
(`estimate_one_testbed_s`, the project's duration model, within 5-13% of measured runs). Its wall
time is the sum of its sessions' (each from its start to its end: calibrations, validations and
trials, everything a user waits for; a resumed run pays each session's calibration again). The
figure is that wall time over the estimate; the target, at most 10% (the replicas issue: the paper's
grid, adaptive 3..40, in at most a tenth of the fixed-40 one-testbed estimate).

Nothing here runs a sweep: the row reads what the shipped run recorded, so it costs nothing in
`--quick` and says `skipped` (with the reason) until a run ships.
"""

from __future__ import annotations

import gzip
from datetime import datetime
from pathlib import Path

from benchmarks.common import Row, skipped
from contracts.errors import UserError
from contracts.run import Manifest, read_manifest

SECTION = "runs"
RUN = Path(__file__).resolve().parent.parent / "reproductions" / "marshalling-paper"
FIGURE = "paper grid wall time / one-testbed fixed estimate"
CASE = "marshalling-paper"
TARGET = ("<=", 10.0)


def wall_s(manifest: Manifest) -> float:
    """Seconds of the run's sessions, start to end (a session without an end has not finished)."""
    total = 0.0
    for session in manifest.sessions:
        if session.ended_at is None:
            raise UserError(
                f"run {manifest.run_id}: a session started at {session.started_at} has no end",
                "resume the run to completion (testbed sweep --resume RUN_DIR) before benchmarking it",
            )
        total += (
            datetime.fromisoformat(session.ended_at) - datetime.fromisoformat(session.started_at)
        ).total_seconds()
    return total


def shipped_trials(run_dir: Path) -> int | None:
    """Rows of the run's trials (shipped compressed, `trials.csv.gz`, or as the sweep wrote them)."""
    for name, opener in (("trials.csv.gz", gzip.open), ("trials.csv", open)):
        if (run_dir / name).is_file():
            with opener(run_dir / name, "rt", encoding="utf-8") as f:
                lines = [line for line in f if line.strip() and not line.startswith("#")]
            return max(len(lines) - 1, 0)  # the header
    return None


def row(run_dir: Path = RUN) -> Row:
    """The figure from a run's manifest; `skipped` when there is no run or it cannot say."""
    path = run_dir / "manifest.json"
    if not path.is_file():
        return skipped(SECTION, FIGURE, CASE, "%", f"no shipped run ({path} not found)", TARGET)
    try:
        manifest = read_manifest(path)
        wall = wall_s(manifest)
    except UserError as exc:
        return skipped(SECTION, FIGURE, CASE, "%", str(exc), TARGET)
    estimate = manifest.estimate_one_testbed_s
    if not estimate:
        return skipped(SECTION, FIGURE, CASE, "%", f"{path} records no one-testbed estimate", TARGET)
    exp = manifest.experiment
    trials = shipped_trials(run_dir)
    testbeds = max((len(s.testbeds or [None]) for s in manifest.sessions), default=1)
    return Row(
        SECTION,
        FIGURE,
        CASE,
        100 * wall / estimate,
        "%",
        TARGET,
        note=f"{wall / 3600:.2f} h over {len(manifest.sessions)} session(s) on {testbeds} testbed(s), "
        f"{trials} trials; estimate {estimate / 3600:.1f} h ({manifest.status})",
        details={
            "run_id": manifest.run_id,
            "status": manifest.status,
            "wall_s": wall,
            "estimate_one_testbed_s": estimate,
            "replicas": testbeds,
            "sessions": len(manifest.sessions),
            "reps": exp.describe_reps(),
            "planned_trials": manifest.planned_trials,
            "trials": trials,
        },
    )


def run(quick: bool = False, progress=print) -> list[Row]:
    return [row()]


def cases(quick: bool) -> list[tuple[str, str, str, tuple | None]]:
    return [(FIGURE, CASE, "%", TARGET)]
