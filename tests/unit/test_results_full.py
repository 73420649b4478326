"""A results file system that fills up (ENOSPC) mid-sweep, without root: trials.csv keeps its whole
rows, the manifest stays whole, the sweep stops in one line with the resume command, and `--resume`
runs exactly the trials that have no row."""

from __future__ import annotations

import builtins
import errno
import json
import logging
import os
from pathlib import Path

import pytest

from contracts import row_file
from contracts.errors import UserError
from contracts.run import Experiment, Manifest, TrialRecord, TrialWriter, read_trials, write_manifest
from testbed import run_files as results
from testbed.run_files import ManifestFile, setup_log
from testbed.sweep.bookkeeping import start_run
from testbed.sweep.phases import run_sweep
from testbed.sweep.plan import plan_trials
from tests.fakes import FAKE_SWEEP, healthy_worker
from tests.helpers import rows, saved, trials_by_id


class Disk:
    """The results file system once it fills: `free` bytes left (None: room for everything). A write
    takes what is left, then fails with ENOSPC, as a full file system's writes do. The manifest,
    replaced whole (`write_manifest`), fails once the disk is full unless `manifest_fits` (space
    freed by another process between the two writes)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, manifest_fits: bool = False) -> None:
        self.free: int | None = None
        self.manifest_fits = manifest_fits
        monkeypatch.setattr(row_file, "open", self.open, raising=False)  # TrialWriter's file (a RowWriter)
        monkeypatch.setattr(results, "write_manifest", self.write_manifest)  # ManifestFile.save's

    def open(self, path, mode="r", buffering=-1, **kwargs):
        file = builtins.open(path, mode, buffering, **kwargs)
        return DiskFile(self, file) if "a" in mode else file  # appending is what fills it

    def write_manifest(self, path: Path, manifest: Manifest) -> None:
        if self.free is not None and not self.manifest_fits:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_manifest(path, manifest)


class DiskFile:
    def __init__(self, disk: Disk, file) -> None:
        self.disk, self.file = disk, file

    def write(self, data) -> int:
        if self.disk.free is None:
            return self.file.write(data)
        if self.disk.free == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = self.file.write(bytes(data[: self.disk.free]))
        self.disk.free -= n
        return n

    def __getattr__(self, name):  # fileno, close, closed, ...
        return getattr(self.file, name)


def record(trial: int) -> TrialRecord:
    return TrialRecord(
        op="mul", size=100, method="raw", ok=True, trial=trial, rate_mbps=10.0, t_total=0.1 + trial
    )


def test_a_row_the_file_system_has_no_room_for_is_not_left_half_written(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    path = tmp_path / "trials.csv"
    writer = TrialWriter(path)
    for i in range(3):
        writer.write(record(i))
    before = path.read_bytes()
    disk.free = 25  # part of the next row fits
    with pytest.raises(OSError) as raised:
        writer.write(record(3))
    assert raised.value.errno == errno.ENOSPC
    assert path.read_bytes() == before, "the row's first bytes were cut back"
    writer.close()  # nothing is left in a buffer for the close to retry

    disk.free = None  # space freed: a resumed sweep appends to the same file
    writer = TrialWriter(path)
    writer.write(record(3))
    writer.close()
    assert [r.trial for r in read_trials(path).records] == [0, 1, 2, 3]


def test_a_manifest_that_cannot_be_written_stays_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "manifest.json"
    exp = Experiment("full", ("mul",), (100,), (10.0,), ("raw",), 3)
    manifest = ManifestFile(path, Manifest("run", "running", exp))
    manifest.save()
    before = path.read_text()

    def full(self, text, *args, **kwargs):
        with builtins.open(self, "w") as f:
            f.write(text[:100])  # what fitted
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(UserError) as raised:
        manifest.update(status="complete")
    monkeypatch.undo()
    assert path.read_text() == before and list(tmp_path.iterdir()) == [path], "no half copy lingers"
    assert str(raised.value) == (
        f"no space left on the results file system: cannot write {path} (No space left on device) "
        f"(fix: free space on the file system of {tmp_path}, then continue with: "
        f"testbed sweep --resume {tmp_path})"
    )


def test_a_log_line_that_cannot_be_written_prints_nothing(tmp_path, capsys):
    log = logging.getLogger("testbed.test-full")
    setup_log(log, tmp_path / "sweep.log")
    (handler,) = log.handlers

    class Full:
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def close(self):
            self.flush()

    real = handler.stream
    handler.stream = Full()
    log.warning("a line for a full file system")
    setup_log(log, tmp_path / "sweep.log")  # the next session closes the old handler
    real.close()
    assert capsys.readouterr() == ("", "")
    for h in log.handlers:
        h.close()


@pytest.mark.parametrize("manifest_fits", [True, False], ids=["trials-full", "all-full"])
def test_a_full_results_file_system_stops_the_sweep_in_one_line_and_resume_completes_it(
    lab, tmp_path, monkeypatch, manifest_fits
):
    disk = Disk(monkeypatch, manifest_fits)
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-1", FAKE_SWEEP, lab)
    answered = []

    def fills_after_six(spec):
        if spec["trial"] >= 0:
            answered.append(spec["trial"])
            if len(answered) == 7:
                disk.free = 30  # the seventh trial's row no longer fits
        return healthy_worker(spec)

    lab.hosts["client"].worker(fills_after_six)
    with pytest.raises(UserError) as raised:
        run_sweep(lab, FAKE_SWEEP, run_dir, manifest)
    csv_path = run_dir / "trials.csv"
    assert str(raised.value) == (
        f"no space left on the results file system: cannot write {csv_path} (No space left on device) "
        f"(fix: free space on the file system of {run_dir}, then continue with: "
        f"testbed sweep --resume {run_dir})"
    )
    assert not lab.is_up(), "the sweep brought the testbed up, and takes it down however it stops"
    before = rows(run_dir)
    assert [int(r["trial"]) for r in before] == answered[:6], "the rows written stay, none cut short"
    data = json.loads((run_dir / "manifest.json").read_text())  # whole, whatever happened
    # a manifest that could not be updated still says running: it reads as interrupted once this
    # process is gone (Manifest.killed, tests/unit/test_interrupted_runs.py)
    assert data["sessions"][-1]["status"] == ("stopped" if manifest_fits else "running")
    assert data["status"] == ("stopped" if manifest_fits else "running")

    disk.free = None  # space freed: `testbed sweep --resume`
    lab.hosts["client"].worker(healthy_worker)
    resumed = ManifestFile.load(run_dir / "manifest.json")
    summary = run_sweep(lab, resumed.manifest.experiment, run_dir, resumed)
    assert summary["status"] == "complete" and summary["ran"] == len(plan_trials(FAKE_SWEEP)) - 6
    assert sorted(trials_by_id(run_dir)) == [t.trial for t in plan_trials(FAKE_SWEEP)]
    assert rows(run_dir)[:6] == before, "resuming only appends"
    data = saved(run_dir)
    assert [s["status"] for s in data["sessions"]] == [
        "stopped" if manifest_fits else "interrupted",
        "complete",
    ]
