"""Stopping processes: the one SIGTERM, wait, SIGKILL loop every part of the tool uses.

A service's process group, the processes left in a namespace, those in the client's cgroup, the
appliance's Open vSwitch daemons and a loopback server in the benchmarks all stop the same way:
politely first, by force after a grace period, reaping our own children so they do not linger as
zombies. A stop returns only once every process it signalled is gone, not merely out of the list it
came from: a process leaves its network namespace (and `ip netns pids`) early in its exit, while its
other threads may still be tearing down sockets and devices.

A process is known by its pid and its start time (`watch`), so a pid the kernel hands to a new
process while we wait is neither waited for nor signalled.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

Running = Callable[[], bool]  # whether one particular process is still running


def _stat(pid: int, tid: int | None = None) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None if it is gone."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid is not None else f"/proc/{pid}/stat"
    try:
        return Path(path).read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _threads_running(pid: int) -> bool:
    """True while any thread of the process has not finished its exit (is not a zombie)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return False
    for tid in tids:
        fields = _stat(pid, tid)
        if fields is not None and fields[0] not in ("Z", "X"):
            return True
    return False


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a zombie leader whose threads still exit counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _threads_running(pid)


def watch(pid: int) -> Running:
    """Whether the process that has `pid` now is still running, asked later (by its start time)."""
    fields = _stat(pid)
    if fields is None:
        return lambda: False
    started = fields[19]  # field 22 of /proc/PID/stat: start time in clock ticks after boot

    def running() -> bool:
        now = _stat(pid)
        return now is not None and now[19] == started and _threads_running(pid)

    return running


def daemon_pids(rundir: Path, programs: Iterable[str]) -> list[int]:
    """The daemons that run of those with a pid file RUNDIR/PROGRAM.pid: a pid counts only while a
    process of that name (its `comm`) has it, so a stale file or a reused pid is not one of ours."""
    found = []
    for program in programs:
        try:
            pid = int((Path(rundir) / f"{program}.pid").read_text().split()[0])
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue
        if comm == program[:15] and alive(pid):
            found.append(pid)
    return found


def stop_all(
    pids: Callable[[], Iterable[int]],
    kill: Callable[[int, int], None] = os.kill,
    grace: float = 5.0,
    poll: float = 0.05,
    *,
    asked: bool = False,
    running: Callable[[int], Running] = watch,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Send SIGTERM to what `pids()` lists, SIGKILL to what is still there after `grace` s, and wait
    up to `grace` s more; return True once nothing is left, False if something outlived SIGKILL.

    `kill` is `os.kill` for single processes or `os.killpg` for process groups. What is left is what
    `pids()` lists now and every process it ever listed that is still running (`running(pid)`,
    taken when the pid is first listed). `asked`: the processes were already asked to exit (say by
    `ovs-appctl exit`), so they get `grace` s to do it before the SIGTERM.
    """
    watched: dict[int, Running] = {}

    def left() -> list[int]:
        listed = list(pids())
        for pid in listed:
            if pid not in watched:
                watched[pid] = running(pid)
        return sorted(set(listed) | {pid for pid, still in watched.items() if still()})

    for sig in ((0,) if asked else ()) + (signal.SIGTERM, signal.SIGKILL):
        found = left()
        if not found:
            return True
        for pid in found:
            try:
                kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = clock() + grace
        while clock() < deadline:
            for pid in found:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            if not left():
                return True
            sleep(poll)
    return not left()


def group_alive(pgid: int) -> bool:
    """True while any process of the group is left (a zombie leader counts until it is reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace: float = 5.0) -> bool:
    """Stop the process group `pgid` (a service started in its own session), all its members."""
    return stop_all(lambda: [pgid] if group_alive(pgid) else [], os.killpg, grace)


def end_when_unheard(fd: int = 1) -> None:
    """SIGKILL this process as soon as nobody can read its answer any more: the read end of `fd`, its
    stdout, was closed, as when its caller is killed with -9 (the kernel closes the caller's end).

    For a process that only answers its caller, like the device calibration: a sweep killed with -9
    runs no handler, and the calibration it started would otherwise run its whole budget (measured:
    31 s) beside the calibration of the session that resumes it, and skew it. The same for a caller
    on this host (through `ip netns exec`) and over SSH (sshd closes the channel). A daemon thread
    waits in poll() for the pipe's error, which comes at once if the caller is gone already; on an
    fd that is not a pipe (a file; a terminal until it hangs up) it never fires.
    """

    def wait() -> None:
        poller = select.poll()
        poller.register(fd, 0)  # no events asked: POLLERR, POLLHUP and POLLNVAL are always reported
        while True:
            for _, event in poller.poll():
                if event & select.POLLNVAL:
                    return  # not an open fd: nothing to watch
                if event & (select.POLLERR | select.POLLHUP):
                    os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait, name="end-when-unheard", daemon=True).start()
