"""A CSV file written a row at a time, versioned by its first line: what a sweep's trials.csv
(`contracts.trials_file`) and a stream's tasks.csv (`contracts.tasks`) share, so both survive a crash
and a full disk alike and spell their cells the same way.

A cell is written as `_cell` spells it and read back with `TRUE_WORDS` and `FALSE_WORDS` for booleans;
each file's reader types the rest.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

TRUE_WORDS = {"true", "1", "yes", "t", "y"}
FALSE_WORDS = {"false", "0", "no", "f", "n"}


def _cell(value: Any) -> str:
    """A value as its CSV cell: empty for None, booleans as true/false, floats exactly (repr)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


class RowWriter:
    """Appends one row at a time to a versioned CSV and flushes it, so a crash loses at most the row in
    flight (the trials of a sweep, the tasks of a stream).

    A row is either wholly in the file or not at all: each is one unbuffered write, and a write that
    fails part-way (a full file system: ENOSPC) is cut back to where the row began before the error
    goes up, so the rows before it stay readable and `--resume` reruns just that trial.
    """

    def __init__(self, path: Path, mark: str, columns: tuple[str, ...]) -> None:
        self.path, self.columns = path, columns
        new = not path.exists() or path.stat().st_size == 0
        # unbuffered: a failed write leaves nothing in a buffer for a later flush or close to retry
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - held open for the whole sweep
        self._buf = io.StringIO()
        self._csv = csv.writer(self._buf)
        if new:
            self._buf.write(f"{mark}\n")
            self._csv.writerow(columns)
            self._flush()

    def _flush(self) -> None:
        data = memoryview(self._buf.getvalue().encode())
        self._buf.seek(0)
        self._buf.truncate()
        start = os.lseek(self._file.fileno(), 0, os.SEEK_END)
        try:
            while data:  # a write to a nearly full file system can be short before it fails
                data = data[self._file.write(data) :]
        except OSError:
            os.ftruncate(self._file.fileno(), start)  # frees, so it works on a full file system
            raise

    def write(self, record) -> None:
        """One record (a dataclass with the file's columns as fields)."""
        self._csv.writerow([_cell(getattr(record, c)) for c in self.columns])
        self._flush()

    def sync(self) -> None:
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            try:
                os.fsync(self._file.fileno())
            finally:
                self._file.close()


def repair(path: Path) -> None:
    """Drop a last line cut short by a crash mid-write, so the file stays valid CSV (the sweep's own
    file, before it appends; readers skip such a line instead of changing the file)."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)
