"""Every trial worker on a host follows every worker's reference runs (client/host_references.py):
replicas on one host see one host speed, so their slowdowns do not drift apart replica by replica."""

import pytest

from client.host_references import HostReferences
from client.scaler import Scaler
from client.worker import TrialWorker
from contracts.cpu_lock import CpuLock, references_path
from contracts.device import key
from contracts.stages import LOCAL
from contracts.worker_api import TrialSpec

ENCODE = ("client", key("encode", "mul", 400, "json"))
KERNEL = ("server", key("kernel", "mul", 400))


def test_each_worker_reads_every_workers_runs_since_its_last_look_from_where_it_started(tmp_path):
    path = str(tmp_path / "cpu.lock.refs")
    a, b = HostReferences(path), HostReferences(path)
    assert a.exchange([(*ENCODE, 0.2)]) == [(*ENCODE, 0.2)]
    assert b.exchange([(*ENCODE, 0.3)]) == [(*ENCODE, 0.3)]  # started at the end: a's earlier run is not its
    assert a.exchange([(*KERNEL, 0.01)]) == [(*ENCODE, 0.3), (*KERNEL, 0.01)]
    assert b.exchange([]) == [(*KERNEL, 0.01)]
    assert b.exchange([]) == []


def test_a_torn_or_foreign_line_is_skipped_and_a_file_made_again_is_read_whole(tmp_path):
    path = tmp_path / "cpu.lock.refs"
    refs = HostReferences(str(path))
    refs.exchange([(*ENCODE, 0.2)])
    with open(path, "ab") as f:
        f.write(
            b'["client", "encode|json|mul|400"\n{"x": 1}\nnot json\n["decode", "mul", 400, "json", 0.1]\n'
        )
        f.write(b'["phone", "decode|json|mul|400", 0.1]\n["server", "decode|json|mul|400", 0.1]\n["cli')
    # an older sweep's line and an unknown role are skipped; the last line's end is not written yet
    assert refs.exchange([]) == [("server", "decode|json|mul|400", 0.1)]
    path.unlink()  # `down` removed it, a later sweep made it again
    other = HostReferences(str(path))
    other.exchange([(*ENCODE, 0.5)])
    assert refs.exchange([]) == [(*ENCODE, 0.5)]


def test_without_a_cpu_lock_a_workers_runs_are_the_hosts():
    assert references_path(None) is None
    refs = HostReferences(None)
    assert refs.exchange([(*ENCODE, 0.2)]) == [(*ENCODE, 0.2)]
    assert references_path("/run/testbed/cpu.lock") == "/run/testbed/cpu.lock.refs"


def test_two_workers_on_one_host_scale_alike_after_one_slow_run(tmp_path, monkeypatch):
    """Issue 25's check: one replica's slow reference run set its slowdowns alone (a replica effect the
    emulation made). Shared, both workers' windows hold both runs, in place of each one's own first figure."""
    size = 48
    k = key("kernel", "mul", size)
    lock = CpuLock(str(tmp_path / "cpu.lock"))
    monkeypatch.setattr("client.worker.CPU_LOCK", lock)
    workers = []
    for _ in range(2):
        worker = TrialWorker(
            "http://127.0.0.1:9", seed=1, timeout=5.0, scaler=Scaler({k: 1000.0}, targets={k: 0.5})
        )
        workers.append(worker)
    assert all(w.references.path == str(tmp_path / "cpu.lock.refs") for w in workers)
    for w in workers:
        w.references.exchange([])  # both are up before the first trial
    first = workers[0].run(TrialSpec(0, "mul", size, "float64", LOCAL)).to_json()
    assert first["ok"], first
    second = workers[1].run(TrialSpec(1, "mul", size, "float64", LOCAL)).to_json()
    workers[0].follow({"cpu_total": 0.0007}, "mul", size, LOCAL)  # the first reads the second's run too
    a, b = (list(w.scaler.recent["client"][k]) for w in workers)
    # each began with its own process's figure of the work (`TrialWorker.meet`), which the first
    # trial's run replaced in both: then both runs, in the order written
    assert b == pytest.approx([first["cpu_total"], second["cpu_total"]])
    assert a == pytest.approx(b + [0.0007])
    unshared = Scaler({k: 1000.0}, targets={k: 0.5})
    unshared.refer("client", k, b[1])
    assert list(unshared.recent["client"][k]) == [b[1]]  # what the second worker would have followed alone
