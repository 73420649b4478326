"""A run killed with -9 says "running" in its manifest: the analysis and a resume call it interrupted."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import datetime

from contracts.run import Experiment, Manifest, Session, read_manifest
from testbed.run_files import ManifestFile, start_session


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def manifest_with(tmp_path, pid: int, host: str = platform.node()) -> ManifestFile:
    exp = Experiment("killed", ("mul",), (100,), (10.0,), ("raw",), 3)
    session = Session(started_at="now", skipped_done=0, status="running", pid=pid, hostname=host)
    manifest = ManifestFile(tmp_path / "manifest.json", Manifest("run", "running", exp, sessions=[session]))
    manifest.save()
    return manifest


def test_the_analysis_shows_a_killed_sweep_as_interrupted(tmp_path):
    manifest_with(tmp_path, dead_pid())
    assert read_manifest(tmp_path / "manifest.json").status == "interrupted"
    manifest_with(tmp_path, os.getpid())  # alive: still running
    assert read_manifest(tmp_path / "manifest.json").status == "running"
    manifest_with(tmp_path, dead_pid(), host="another-host")  # can't tell from here
    assert read_manifest(tmp_path / "manifest.json").status == "running"


def test_a_resume_marks_the_killed_session_interrupted_and_ended_at_its_last_write(tmp_path):
    manifest = manifest_with(tmp_path, dead_pid())
    (tmp_path / "trials.csv").write_text("rows\n")
    os.utime(tmp_path / "trials.csv", (1_800_000_000, 1_800_000_000))  # its last row
    (tmp_path / "sweep.log").write_text("lines\n")
    os.utime(tmp_path / "sweep.log", (1_799_999_000, 1_799_999_000))
    session = start_session(manifest, skipped_done=3)
    saved = json.loads((tmp_path / "manifest.json").read_text())
    assert [s["status"] for s in saved["sessions"]] == ["interrupted", "running"]
    ended = datetime.strptime(saved["sessions"][0]["ended_at"], "%Y-%m-%dT%H:%M:%S%z")
    assert ended.timestamp() == 1_800_000_000  # when the killed session last wrote a row
    assert session.pid == os.getpid() and session.hostname == platform.node()
