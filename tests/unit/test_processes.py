"""The one SIGTERM-wait-SIGKILL loop (`contracts.processes.stop_all`) and the stops built on it (the
appliance's OVS daemons, the embedded testbed's `down`): each returns only once what it stopped has
exited. The loop's logic on a scripted clock; the stops on real (unprivileged) processes."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance import switch as switch_mod
from appliance.switch import Switch
from contracts.processes import alive, daemon_pids, stop_all, watch
from tests.helpers import REPO


class Clock:
    """A scripted clock: `sleep` advances it; `at` runs an event once its time has come."""

    def __init__(self) -> None:
        self.now = 0.0
        self.events: list[tuple[float, callable]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for when, event in [e for e in self.events if e[0] <= self.now]:
            self.events.remove((when, event))
            event()


class Processes:
    """Processes as `stop_all` sees them: listed (in a namespace, a cgroup) and running. Each one
    reacts to a signal by leaving the list at once and finishing its exit `exits_after` s later;
    `ignores` signals have no effect on it."""

    def __init__(self, clock: Clock, **procs: dict) -> None:
        self.clock = clock
        self.procs = {int(k[1:]): {"listed": True, "running": True, **v} for k, v in procs.items()}
        self.sent: list[tuple[float, int, int]] = []

    def pids(self) -> list[int]:
        return [pid for pid, p in self.procs.items() if p["listed"]]

    def running(self, pid: int):
        return lambda: self.procs[pid]["running"]

    def kill(self, pid: int, sig: int) -> None:
        self.sent.append((self.clock.now, pid, sig))
        p = self.procs[pid]
        if sig == 0 or sig in p.get("ignores", ()) or not p["running"]:
            return
        p["listed"] = False  # gone from its namespace's list as soon as it starts exiting

        def done(p=p) -> None:
            p["running"] = False

        self.clock.events.append((self.clock.now + p.get("exits_after", 0.0), done))

    def stop(self, grace: float = 5.0, **kwargs) -> bool:
        return stop_all(
            self.pids,
            self.kill,
            grace=grace,
            poll=0.1,
            running=self.running,
            clock=self.clock,
            sleep=self.clock.sleep,
            **kwargs,
        )


def test_stop_waits_for_a_process_that_left_its_list_but_is_still_exiting():
    clock = Clock()
    procs = Processes(clock, p7={"exits_after": 1.5})  # like ovs-vswitchd closing its ports
    assert procs.stop() is True
    assert procs.sent == [(0.0, 7, signal.SIGTERM)]
    assert clock.now >= 1.5 and not procs.procs[7]["running"]


def test_sigkill_follows_the_grace_period_and_is_waited_for_too():
    clock = Clock()
    procs = Processes(clock, p7={"ignores": (signal.SIGTERM,), "exits_after": 2.0}, p8={})
    assert procs.stop(grace=3.0) is True
    assert [(t, pid, sig) for t, pid, sig in procs.sent] == [
        (0.0, 7, signal.SIGTERM),
        (0.0, 8, signal.SIGTERM),
        (pytest.approx(3.0), 7, signal.SIGKILL),
    ]
    assert clock.now == pytest.approx(5.0, abs=0.11)  # SIGKILL at 3 s, its exit over at 5 s


def test_a_process_that_outlives_sigkill_is_reported_after_a_bounded_wait():
    clock = Clock()
    procs = Processes(clock, p7={"exits_after": 1000.0})  # stuck in the kernel
    assert procs.stop(grace=2.0) is False
    assert [sig for _, _, sig in procs.sent] == [signal.SIGTERM, signal.SIGKILL]
    assert clock.now == pytest.approx(4.0)


def test_processes_already_asked_to_exit_get_the_grace_period_before_sigterm():
    clock = Clock()
    procs = Processes(clock, p7={})
    # `ovs-appctl exit` was sent: the daemon exits half a second later, on its own
    clock.events.append((0.5, lambda: procs.procs[7].update(listed=False, running=False)))
    assert procs.stop(grace=2.0, asked=True) is True
    assert procs.sent == [(0.0, 7, 0)]  # no SIGTERM: it exited within its grace
    assert clock.now == pytest.approx(0.5)


# ------------------------------------------------------------------ real processes
def fake_daemon(tmp_path: Path, program: str) -> subprocess.Popen:
    """A process whose name (`comm`) is `program`: `sleep` copied under that name."""
    binary = tmp_path / program
    shutil.copy(shutil.which("sleep"), binary)
    proc = subprocess.Popen([str(binary), "600"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{proc.pid}/comm").read_text().strip() != program:  # Popen may return before exec
        assert time.monotonic() < deadline, f"{program} did not start"
        time.sleep(0.01)
    return proc


def test_watch_knows_a_process_by_more_than_its_pid():
    proc = subprocess.Popen(["sleep", "600"])
    running = watch(proc.pid)
    assert running() and alive(proc.pid)
    proc.kill()
    proc.wait()
    assert not running() and not alive(proc.pid)


def test_daemon_pids_takes_a_pid_file_only_for_a_process_of_that_name(tmp_path):
    daemon = fake_daemon(tmp_path, "ovs-vswitchd")
    try:
        (tmp_path / "ovs-vswitchd.pid").write_text(f"{daemon.pid}\n")
        (tmp_path / "ovsdb-server.pid").write_text(f"{daemon.pid}\n")  # another program's pid
        assert daemon_pids(tmp_path, ("ovs-vswitchd", "ovsdb-server", "absent")) == [daemon.pid]
    finally:
        daemon.kill()
        daemon.wait()
    assert daemon_pids(tmp_path, ("ovs-vswitchd",)) == []  # a stale pid file


def test_switch_down_returns_once_its_daemons_have_exited(tmp_path, monkeypatch):
    """`ovs-appctl exit` returns before the daemon has exited; here it does nothing at all."""
    ran = []
    monkeypatch.setattr(switch_mod, "run", lambda argv, **kw: ran.append(argv))
    daemons = {p: fake_daemon(tmp_path, p) for p in ("ovs-vswitchd", "ovsdb-server")}
    for program, proc in daemons.items():
        (tmp_path / f"{program}.pid").write_text(f"{proc.pid}\n")
    switch = Switch("br", ("a", "b"), tmp_path)
    try:
        assert switch.down(grace=0.2) is True
        assert not [p for p in daemons.values() if alive(p.pid)]
    finally:
        for proc in daemons.values():
            proc.kill()
            proc.wait()
    assert ran == switch.plan_down()


def test_down_of_our_own_switch_does_not_wait_for_ovs_vswitchd_and_a_systems_does(tmp_path):
    """A dead ovs-vswitchd (the sweep's repair) would keep a waiting `del-br` for its whole --timeout;
    our own is told to exit right after, removing its datapaths (--cleanup)."""
    own = Switch("br", ("a", "b"), tmp_path).plan_down()
    assert all("--no-wait" in argv for argv in own if "del-br" in argv)
    assert own[-2][-2:] == ["exit", "--cleanup"] and own[-2][2].endswith("ovs-vswitchd.ctl")
    (system,) = Switch("br", ("a", "b"), tmp_path, own=False).plan_down()
    assert "--no-wait" not in system and "del-br" in system


def test_switch_problems_name_the_daemon_that_died_and_restart_starts_from_a_fresh_database(
    tmp_path, monkeypatch
):
    """The sweep's per-trial check of the switch, and its repair: down, the old database removed (else
    `ovsdb-tool create` fails), then every command of `up` again."""
    daemons = {p: fake_daemon(tmp_path, p) for p in ("ovs-vswitchd", "ovsdb-server")}
    for program, proc in daemons.items():
        (tmp_path / f"{program}.pid").write_text(f"{proc.pid}\n")
    switch = Switch("br", ("a", "b"), tmp_path)
    try:
        assert switch.problems() == []
        daemons["ovs-vswitchd"].kill()
        daemons["ovs-vswitchd"].wait()
        assert switch.problems() == [
            f"ovs-vswitchd is not running (no live process has the pid in {tmp_path / 'ovs-vswitchd.pid'})"
        ]
        ran = []
        monkeypatch.setattr(switch_mod, "run", lambda argv, **kw: ran.append(argv))
        switch.db.write_text("old")
        switch.restart()
        assert not switch.db.exists() and not alive(daemons["ovsdb-server"].pid)
        assert ran == switch.plan_down() + switch.plan_up()
    finally:
        for proc in daemons.values():
            proc.kill()
            proc.wait()


def test_netns_down_stops_and_waits_for_the_ovs_daemons_of_its_run_dir(netns):
    """Even those no namespace lists any more (exiting, or the namespace already gone)."""
    rundir = Path(netns.switch_args()["rundir"])
    rundir.mkdir(parents=True)
    daemon = fake_daemon(rundir, "ovs-vswitchd")
    (rundir / "ovs-vswitchd.pid").write_text(f"{daemon.pid}\n")
    netns.hosts["client"].reply("cpu.remove", lambda name: False)
    try:
        netns.down()
        assert not alive(daemon.pid)
    finally:
        daemon.kill()
        daemon.wait()


def test_stop_all_on_real_processes_returns_when_they_are_gone():
    ignores_term = [
        sys.executable,
        "-c",
        "import signal, time; signal.signal(15, signal.SIG_IGN); time.sleep(600)",
    ]
    procs = [subprocess.Popen(ignores_term), subprocess.Popen(["sleep", "600"])]
    pids = [p.pid for p in procs]
    assert stop_all(lambda: [pid for pid in pids if alive(pid)], grace=0.5) is True
    assert not [pid for pid in pids if alive(pid)]


# a process that starts two children that answer it on their stdout, one that ends when its answer can
# no longer be read and one that does not, and says their pids
CALLER = """
import subprocess, sys, time
body = "import time; time.sleep(600)"
guard = "from contracts.processes import end_when_unheard; end_when_unheard(); "
ready = "print('ready', file=sys.stderr, flush=True); "
children = [
    subprocess.Popen([sys.executable, "-c", "import sys; " + guard + ready + body], stdout=subprocess.PIPE),
    subprocess.Popen([sys.executable, "-c", body], stdout=subprocess.PIPE),
]
print(*(c.pid for c in children), flush=True)
time.sleep(600)
"""


def test_a_process_whose_answer_nobody_can_read_ends_when_its_caller_is_killed():
    """The device calibration's guard: a sweep killed with -9 takes the calibration it started along."""
    caller = subprocess.Popen(
        [sys.executable, "-c", CALLER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    guarded, unguarded = (int(pid) for pid in caller.stdout.readline().split())
    try:
        assert caller.stderr.readline() == "ready\n"  # its guard is in force
        caller.kill()
        caller.wait()
        deadline = time.monotonic() + 30
        while alive(guarded) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(guarded)
        assert alive(unguarded), "without the guard a child outlives its caller"
    finally:
        caller.kill()
        stop_all(lambda: [pid for pid in (guarded, unguarded) if alive(pid)], grace=0.5)
