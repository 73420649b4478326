"""The sweep's side of a run's files: its id, the machine facts it records, and its manifest handle.

The files' format (trials.csv, manifest.json) is the contract in `contracts.run`.
"""

from __future__ import annotations

import errno
import os
import platform
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contracts import __version__
from contracts.errors import UserError
from contracts.run import Manifest, TrialRecord, TrialWriter, read_manifest, write_manifest

# what a write to the results can meet that the user fixes (anything else is a bug)
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_UNWRITABLE = (errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM)


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


MACHINE = ("hostname", "cpu_model", "cpus", "kernel", "python", "numpy")


def machine() -> dict:
    """The facts of this host that set how fast it runs the trials' work: a calibration made under
    the same facts still holds (the client's slowdowns follow the host's drift: `client.scaler`)."""
    env = environment()
    return {k: env[k] for k in MACHINE}


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


class ManifestFile:
    """The sweep's handle on a run's manifest.json: the typed manifest, saved whole after each change."""

    def __init__(self, path: Path, manifest: Manifest) -> None:
        self.path = path
        self.manifest = manifest
        self._lock = threading.RLock()  # replicas' threads change and save it

    @classmethod
    def load(cls, path: Path) -> ManifestFile:
        return cls(path, read_manifest(path))

    def update(self, **changes) -> None:
        with self._lock:
            for key, value in changes.items():
                setattr(self.manifest, key, value)  # an unknown key raises: the manifest has slots
            self.save()

    def save(self) -> None:
        with self._lock, writing(self.path, self.path.parent):
            write_manifest(self.path, self.manifest)


class TrialFile(TrialWriter):
    """The sweep's trials.csv: `TrialWriter`, whose write failures stop the sweep in one line with
    the resume command (see `writing`)."""

    def __init__(self, path: Path) -> None:
        with writing(path, path.parent):
            super().__init__(path)

    def write(self, record: TrialRecord) -> None:
        with writing(self.path, self.path.parent):
            super().write(record)

    def sync(self) -> None:
        with writing(self.path, self.path.parent):
            super().sync()

    def close(self) -> None:
        with writing(self.path, self.path.parent):
            super().close()


@contextmanager
def writing(path: Path, run_dir: Path) -> Iterator[None]:
    """Writing one of a run's files: a full or unwritable results file system is the user's to fix,
    a UserError naming the file and the resume command. What was written before stays valid (trials.csv
    is cut back to its last whole row, the manifest is replaced whole or not at all)."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _FULL:
            what = f"no space left on the results file system: cannot write {path} ({exc.strerror})"
            fix = f"free space on the file system of {run_dir}"
        elif exc.errno in _UNWRITABLE:
            what = f"cannot write {path}: {exc.strerror}"
            fix = f"make {run_dir} writable"
        else:
            raise
        raise UserError(what, f"{fix}, then continue with: testbed sweep --resume {run_dir}") from None
