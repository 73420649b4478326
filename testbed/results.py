"""A run's files: `trials.csv` appended and flushed trial by trial, `manifest.json`, and the log.

These files are the contract with the analysis, which reads nothing else.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import subprocess
import time
from pathlib import Path

from contracts import __version__
from contracts.errors import UserError
from contracts.trials import COLUMNS


class TrialWriter:
    """Appends one row per finished trial and flushes it, so a crash loses at most the trial in flight."""

    def __init__(self, path: Path) -> None:
        self.path = path
        repair(path)
        new = not path.exists() or path.stat().st_size == 0
        self._file = open(path, "a", newline="")  # noqa: SIM115 - held open for the whole sweep
        self._buf = io.StringIO()
        self._csv = csv.DictWriter(self._buf, fieldnames=COLUMNS, extrasaction="ignore")
        if new:
            self._csv.writeheader()
            self._flush()

    def _flush(self) -> None:
        # one write() per row: a row is either wholly in the file or not at all (see `repair`)
        self._file.write(self._buf.getvalue())
        self._file.flush()
        self._buf.seek(0)
        self._buf.truncate()

    def write(self, row: dict) -> None:
        self._csv.writerow({k: _cell(v) for k, v in row.items()})
        self._flush()

    def sync(self) -> None:
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def repair(path: Path) -> None:
    """Drop a last line cut short by a crash mid-write, so the file stays valid CSV."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def trial_outcomes(path: Path) -> dict[int, float | None]:
    """Each trial with a row: its t_total, or None if it failed (what an adaptive sweep decides on)."""
    if not path.exists():
        return {}
    repair(path)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            return {}
        if "trial" not in reader.fieldnames:
            raise UserError(f"{path} has no 'trial' column", "resume only runs written by testbed sweep")
        return {
            int(row["trial"]): float(row["t_total"])
            if row.get("ok") == "true" and row.get("t_total")
            else None
            for row in reader
            if row.get("trial", "").strip()
        }


def new_run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def environment() -> dict:
    """Versions and machine facts a reader of the results needs to interpret them."""
    import numpy

    def cmd(argv):
        try:
            return subprocess.run(
                argv, capture_output=True, text=True, timeout=10, check=False
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return None

    root = Path(__file__).resolve().parent.parent
    cpu = next(
        (line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )
    ovs = cmd(["ovs-vsctl", "--version"])
    return {
        "tool_version": __version__,
        "git_revision": cmd(["git", "-C", str(root), "rev-parse", "HEAD"]),
        "git_dirty": bool(cmd(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"])),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "ovs": ovs.splitlines()[0] if ovs else None,
        "kernel": platform.release(),
        "cpu_model": cpu,
        "cpus": os.cpu_count(),
        "hostname": platform.node(),
    }


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


class Manifest:
    """manifest.json, rewritten whole (atomically) whenever it changes."""

    def __init__(self, path: Path, data: dict | None = None) -> None:
        self.path = path
        self.data = data if data is not None else {}

    @classmethod
    def load(cls, path: Path) -> Manifest:
        try:
            return cls(path, json.loads(path.read_text()))
        except FileNotFoundError:
            raise UserError(
                f"{path} does not exist", "pass the directory of a run made by testbed sweep"
            ) from None
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None

    def update(self, **changes) -> None:
        self.data.update(changes)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str))
        os.replace(tmp, self.path)
