"""The one writer of a run's files: its id, the machine facts it records, its manifest (created, its
sessions begun and ended, every validation and repair appended: `ManifestFile`, saved whole after each
change), its trials.csv (`TrialFile`), its log, and what a full or unwritable file system means.

The files' format (trials.csv, manifest.json) is the contract in `contracts.run`; what the sweep
writes into them is `testbed.sweep.bookkeeping`'s.
"""

from __future__ import annotations

import errno
import logging
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
from contracts.run import (
    MANIFEST_FILE,
    LinkCheck,
    Manifest,
    Repair,
    Session,
    TrialRecord,
    TrialWriter,
    read_manifest,
    write_manifest,
)

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


def create_run(run_dir: Path, manifest: Manifest) -> ManifestFile:
    """A new run's directory with its first manifest; an existing run is never overwritten."""
    if run_dir.exists() and any(run_dir.iterdir()):
        raise UserError(f"{run_dir} already exists", "give another --name, or --resume it")
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = ManifestFile(run_dir / MANIFEST_FILE, manifest)
    handle.save()
    return handle


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def start_session(manifest: ManifestFile, skipped_done: int, testbeds: list[dict] | None = None) -> Session:
    """A session (one `testbed sweep`, first or resumed) begins; returns its entry for `end_session`.

    The sweep holds the testbed's lock, so an earlier session still marked running was killed.
    """
    for earlier in manifest.manifest.sessions:
        if earlier.status == "running":
            earlier.status = "interrupted"
            earlier.ended_at = earlier.ended_at or last_written(manifest.path.parent)
    session = Session(
        started_at=now(),
        skipped_done=skipped_done,
        status="running",
        pid=os.getpid(),
        hostname=platform.node(),
        testbeds=testbeds,
    )
    manifest.manifest.sessions.append(session)
    manifest.update(status="running")
    return session


def last_written(run_dir: Path) -> str | None:
    """When a killed session last wrote to its run (a trial's row, a log line): its end as far as the
    run can tell, so the wall time of a run resumed after a kill still adds up (`benchmarks.grid`)."""
    times = [p.stat().st_mtime for p in run_dir.iterdir() if p.is_file() and p.name != MANIFEST_FILE]
    if not times:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(max(times)))


def end_session(manifest: ManifestFile, session: Session, status: str) -> None:
    session.ended_at, session.status = now(), status
    manifest.update(status=status, ended_at=now())


def add_validation(manifest: ManifestFile, *entries: LinkCheck) -> None:
    manifest.manifest.validation.extend(entries)
    manifest.save()


def add_repair(manifest: ManifestFile, repair: Repair) -> None:
    manifest.manifest.repairs.append(repair)
    manifest.save()


def setup_log(log: logging.Logger, path: Path) -> None:
    """Send `log` to `path` (only there), replacing the file of an earlier session."""
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()
    handler = _LogFile(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


class _LogFile(logging.FileHandler):
    """sweep.log, whose lines are dropped when they cannot be written (a full results file system):
    logging's default prints a traceback per line on the terminal, and the sweep's own stop already
    names the problem in one line."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass

    def close(self) -> None:
        try:
            super().close()
        except OSError:
            pass  # its last lines could not be flushed (see handleError)
