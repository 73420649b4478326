"""Reading a run: `trials.csv` (required) and `manifest.json` (optional), through the contract's readers.

The analysis accepts any trials.csv of the sweep's format, including one written by hand or by another
tool: `contracts.run` checks every value once and names a bad one with its column and line; here the
rows become the data frame the rest of the package trusts, and a run with nothing to analyse is refused.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from contracts import run as run_files
from contracts.errors import UserError
from contracts.run import COLUMNS, MANIFEST_FILE, PACKED_TRIALS_FILE, TRIALS_FILE, Manifest
from contracts.stages import LOCAL, STAGES, offload_label

# numeric columns, NaN where a row has no value (not measured, a failed trial, an older run)
NUMBERS = (
    "trial",
    "rep",
    "bytes_up",
    "bytes_down",
    "t_total",
    *STAGES,
    "t_request",
    "t_server_start",
    "t_server_queue",
)


@dataclass(frozen=True)
class Run:
    """A run as the analysis sees it: one row per trial, plus the manifest if there is one."""

    run_dir: Path
    # line, op, size, rate_mbps, method (with its server: contracts.stages.offload_label), server, ok,
    # error, dtype, run_id, t_total, *STAGES
    trials: pd.DataFrame
    manifest: Manifest | None  # annotates the report and names the planned grid; may be missing


def load_run(run_dir: Path) -> Run:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(
            f"run directory {run_dir} does not exist",
            "pass the directory of a run, e.g. results/NAME-TIMESTAMP",
        )
    path = run_dir / TRIALS_FILE
    if not path.is_file() and (run_dir / PACKED_TRIALS_FILE).is_file():  # a shipped run, as it ships
        path = run_dir / PACKED_TRIALS_FILE
    if not path.is_file():
        raise UserError(f"{path} does not exist", "pass the directory of a run made by `testbed sweep`")
    manifest_path = run_dir / MANIFEST_FILE
    manifest = run_files.read_manifest(manifest_path) if manifest_path.is_file() else None
    return Run(run_dir, trials_frame(path), manifest)


def trial_devices(trials: pd.DataFrame) -> list[str]:
    """The client devices the rows ran as, in name order; empty when the run's clients were of one
    device (no column `device`, as in frames made by hand, or every value empty)."""
    if "device" not in trials:
        return []
    return sorted({d for d in trials["device"] if isinstance(d, str) and d})


def row_devices(trials: pd.DataFrame) -> pd.Series:
    """Each row's client device, "" when the run's clients were of one device: what the local
    baseline is grouped by beside (op, size), so no cell is decided against another device's."""
    if "device" not in trials:
        return pd.Series("", index=trials.index, dtype=object)
    return trials["device"].fillna("").astype(object)


def refuse_several_devices(trials: pd.DataFrame, what: str, fix: str) -> None:
    """A UserError for an analysis that models one client device, given a run whose clients were of
    several: pooling their rows would mix the devices' times."""
    if len(devices := trial_devices(trials)) > 1:
        told = f"{len(devices)} ({', '.join(devices)})"
        raise UserError(f"{what} models one client device; the run's clients were of {told}", fix)


def output_dir(run: Run) -> Path:
    """RUN_DIR/analysis, created if need be."""
    return writable_dir(run.run_dir / "analysis", "make the run directory writable")


def writable_dir(path: Path, fix: str) -> Path:
    """`path` (and its parents), created if need be; a user's error with `fix` when it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {path}: {exc.strerror}", fix) from None
    return path


def trials_frame(path: Path) -> pd.DataFrame:
    """trials.csv through the contract's one reader, as the frame the analysis works on."""
    trials = run_files.read_trials(path)
    if not trials.records:
        raise UserError(
            f"{path} has no trials, only a header", "run the sweep first, or pass a run that finished trials"
        )
    frame = pd.DataFrame([vars(r) for r in trials.records], columns=list(COLUMNS))  # flat: no deep copy
    frame.insert(0, "line", trials.lines)
    frame["rate_mbps"] = frame["rate_mbps"].astype(float)  # NaN for the baseline: it has no rate
    for column in ("error", "dtype", "run_id", "server", "device"):
        frame[column] = frame[column].fillna("")
    # the analysis's method is the way a trial offloaded: the row's method, with its server when that
    # is not Python, so every table and figure treats the server as it treats the method
    # (`grpc@cpp`), with several clients how many offloaded at once (`raw-x4`), and with clients of
    # several devices the device it ran as (`raw-x4 on paper-p4`; a local row stays `local`, its
    # device in the column `device`, empty when the run's clients are of one device)
    settings = [
        [None if pd.isna(v) else int(v) for v in frame[column]]
        for column in ("clients", "parallelism", "io_kb", "concurrency")
    ]
    frame["method"] = [
        offload_label(m, s, *setting, device=d)
        for m, s, d, *setting in zip(
            frame["method"], frame["server"], frame["device"], *settings, strict=True
        )
    ]
    for column in NUMBERS:
        frame[column] = frame[column].astype(float)  # NaN: not measured, or failed
    # communication without the cgi stack's process start-up (t_comm includes it: the paper's
    # definition); the same as t_comm where the server had no start-up stage (wsgi, older runs)
    frame["t_comm_net"] = frame["t_comm"] - frame["t_server_start"].fillna(0.0)
    _check_run(frame, path)
    return frame


def _check_run(trials: pd.DataFrame, path: Path) -> None:
    if not trials["ok"].any():
        errors = Counter(e.strip().splitlines()[0][:200] for e in trials["error"] if e.strip())
        common = f"; most common error: {errors.most_common(1)[0][0]}" if errors else ""  # one line
        raise UserError(
            f"{path}: all {len(trials)} trials failed, nothing to analyse{common}",
            "fix the failure and run the sweep again (see the error column)",
        )
    if (trials["method"] == LOCAL).all():
        raise UserError(
            f"{path} has only local trials, nothing to compare them with",
            "run the sweep with at least one marshalling method",
        )
    dtypes = sorted({d for d in trials["dtype"] if d})
    if len(dtypes) > 1:
        raise UserError(
            f"{path} mixes dtypes {', '.join(dtypes)}; cells of different dtypes cannot be compared",
            "split trials.csv by dtype and analyse each part as its own run",
        )


# a run that varies the link's delay or loss (trials format 11): the columns of a point of the link
POINT = ["delay_ms", "loss_pct"]


def link_points(trials: pd.DataFrame) -> list[tuple[float | None, float | None]]:
    """The (delay, loss) points the run's remote rows ran at, least first; empty when it varies neither
    (no such columns, as in runs before trials format 11, or every value empty)."""
    if not any(c in trials for c in POINT):
        return []
    remote = trials[trials["method"] != LOCAL]
    values = [remote[c] if c in remote else pd.Series(None, index=remote.index) for c in POINT]
    if not any(v.notna().any() for v in values):
        return []
    pairs = {(point_value(d), point_value(loss)) for d, loss in zip(*values, strict=True)}
    return sorted(pairs, key=lambda p: (p[0] or 0.0, p[1] or 0.0))


def main_point(trials: pd.DataFrame) -> tuple[float | None, float | None] | None:
    points = link_points(trials)
    return points[0] if points else None


def at_point(trials: pd.DataFrame, point: tuple[float | None, float | None] | None) -> pd.DataFrame:
    """The local rows and the remote rows at `point` (all rows when it is None)."""
    if point is None:
        return trials
    here = pd.Series(True, index=trials.index)
    for column, value in zip(POINT, point, strict=True):
        values = trials[column] if column in trials else pd.Series(None, index=trials.index)
        here &= values.isna() if value is None else values == value
    return trials[(trials["method"] == LOCAL) | here]


def point_value(v) -> float | None:
    return None if pd.isna(v) else float(v)
