"""The sweep's side of a run's files: its id, the machine facts it records, and its manifest handle.

The files' format (trials.csv, manifest.json) is the contract in `contracts.run`.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

from contracts import __version__
from contracts.run import Manifest, read_manifest, write_manifest


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


class ManifestFile:
    """The sweep's handle on a run's manifest.json: the typed manifest, saved whole after each change."""

    def __init__(self, path: Path, manifest: Manifest) -> None:
        self.path = path
        self.manifest = manifest

    @classmethod
    def load(cls, path: Path) -> ManifestFile:
        return cls(path, read_manifest(path))

    def update(self, **changes) -> None:
        for key, value in changes.items():
            setattr(self.manifest, key, value)  # an unknown key raises: the manifest has slots
        self.save()

    def save(self) -> None:
        write_manifest(self.path, self.manifest)
