"""Reading a run: `trials.csv` (required) and `manifest.json` (optional), checked where they enter.

The analysis must accept any trials.csv of the sweep's format, including one written by hand or by
another tool, so every value is checked here once and a bad one is reported with its column and line;
the rest of the package can then trust the data frame it gets.
"""

from __future__ import annotations

import csv
import json
import math
import platform
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from contracts.errors import UserError
from contracts.processes import alive
from contracts.trials import LOCAL, STAGES

OPTIONAL_NUMBERS = ("trial", "rep", "bytes_up", "bytes_down")
OPTIONAL = ("error", "dtype", "run_id", "emulation_flagged", *OPTIONAL_NUMBERS)
REQUIRED = ("op", "size", "rate_mbps", "method", "ok", "t_total", *STAGES)
_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n"}
_FIX_FORMAT = "trials.csv needs the columns written by `testbed sweep` (see testbed/results.py)"


@dataclass(frozen=True)
class Run:
    """A run as the analysis sees it: one row per trial, plus the manifest if there is one."""

    run_dir: Path
    trials: pd.DataFrame  # line, op, size, rate_mbps, method, ok, error, dtype, run_id, t_total, *STAGES
    manifest: dict | None


def load_run(run_dir: Path) -> Run:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(
            f"run directory {run_dir} does not exist",
            "pass the directory of a run, e.g. results/NAME-TIMESTAMP",
        )
    path = run_dir / "trials.csv"
    if not path.is_file():
        raise UserError(f"{path} does not exist", "pass the directory of a run made by `testbed sweep`")
    return Run(run_dir, read_trials(path), read_manifest(run_dir / "manifest.json"))


def output_dir(run: Run) -> Path:
    """RUN_DIR/analysis, created if need be."""
    out_dir = run.run_dir / "analysis"
    try:
        out_dir.mkdir(exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create {out_dir}: {exc.strerror}", "make the run directory writable"
        ) from None
    return out_dir


def read_manifest(path: Path) -> dict | None:
    """The manifest annotates the report and names the planned grid; the numbers come from trials.csv
    alone, so a missing manifest is fine, but a broken one is reported rather than silently ignored."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}",
            "repair it or move it away (the analysis works without a manifest)",
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} does not hold a JSON object", "repair it or move it away")
    return {**data, "status": "interrupted"} if _killed(data) else data


def _killed(manifest: dict) -> bool:
    """A run whose sweep was killed (-9) still says "running"; its process, on this host, is gone."""
    sessions = manifest.get("sessions") or []
    last = sessions[-1] if sessions and isinstance(sessions[-1], dict) else {}
    pid = last.get("pid")
    return (
        manifest.get("status") == "running"
        and isinstance(pid, int)
        and last.get("hostname") == platform.node()
        and not alive(pid)
    )


def read_trials(path: Path) -> pd.DataFrame:
    try:
        f = open(path, newline="", encoding="utf-8-sig")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}", "check the file's permissions") from None
    with f:
        reader = csv.reader(f)
        try:
            rows = _read_rows(reader, path)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise UserError(
                f"{path} line {reader.line_num + 1}: not readable as CSV ({exc})", _FIX_FORMAT
            ) from None
    if not rows:
        raise UserError(
            f"{path} has no trials, only a header", "run the sweep first, or pass a run that finished trials"
        )
    trials = pd.DataFrame(rows)
    _check_run(trials, path)
    return trials


def _read_rows(reader, path: Path) -> list[dict]:
    header = next(reader, None)
    if header is None:
        raise UserError(f"{path} is empty", "run the sweep first, or pass the directory of a finished run")
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UserError(f"{path} lacks column(s) {', '.join(missing)}", _FIX_FORMAT)
    index = {name: header.index(name) for name in (*REQUIRED, *OPTIONAL) if name in header}
    rows = []
    for fields in reader:
        if not any(x.strip() for x in fields):
            continue  # blank line
        raw = {name: (fields[i].strip() if i < len(fields) else "") for name, i in index.items()}
        rows.append(_parse_row(raw, path, reader.line_num))
    return rows


def _parse_row(raw: dict[str, str], path: Path, line: int) -> dict:
    def bad(column: str, why: str) -> UserError:
        return UserError(f"{path} line {line}: {column} {why}", _FIX_FORMAT)

    ok_text = raw["ok"].lower()
    if ok_text not in _TRUE | _FALSE:
        raise bad("ok", f"is {raw['ok']!r}, expected true or false")
    ok = ok_text in _TRUE
    for column in ("op", "method"):
        if not raw[column]:
            raise bad(column, "is empty")
    method = raw["method"]
    is_local = method.lower() == LOCAL
    size = _number(raw["size"])
    if size is None:
        raise bad("size", f"is {raw['size']!r}, not a number")
    if is_local:
        rate = math.nan  # the baseline does not use the network; a rate there means nothing
    else:
        rate = _number(raw["rate_mbps"])
        if rate is None or rate <= 0:
            raise bad("rate_mbps", f"is {raw['rate_mbps']!r}; a remote trial needs a positive rate in Mbit/s")
    row = {
        "line": line,
        "op": raw["op"],
        "size": int(size) if size.is_integer() else size,
        "rate_mbps": rate,
        "method": LOCAL if is_local else method,
        "ok": ok,
        "error": raw.get("error", ""),
        "dtype": raw.get("dtype", ""),
        "run_id": raw.get("run_id", ""),
    }
    for column in OPTIONAL_NUMBERS:  # written by newer sweeps; unknown (NaN) in older runs
        value = _number(raw.get(column, ""))
        row[column] = math.nan if value is None else value
    row["emulation_flagged"] = raw.get("emulation_flagged", "").lower() in _TRUE
    for column in ("t_total", *STAGES):
        row[column] = math.nan
        text = raw[column]
        if not ok or not text:
            # failed trials' times are meaningless; an empty stage was not measured
            if ok and column == "t_total":
                raise bad("t_total", "is empty in a successful trial (ok=true)")
            continue
        value = _number(text)
        if value is None:
            raise bad(column, f"is {text!r}, not a time in seconds")
        if column == "t_total" and value < 0:
            raise bad(column, f"is {text!r}, a negative completion time")
        row[column] = value
    return row


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


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
