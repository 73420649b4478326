"""Stopping processes: the one SIGTERM, wait, SIGKILL loop every part of the tool uses.

A service's process group, the processes left in a namespace, those in the client's cgroup and a
loopback server in the benchmarks all stop the same way: politely first, by force after a grace
period, reaping our own children so they do not linger as zombies.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_all(
    pids: Callable[[], Iterable[int]],
    kill: Callable[[int, int], None] = os.kill,
    grace: float = 5.0,
    poll: float = 0.05,
) -> bool:
    """Send SIGTERM to what `pids()` lists, SIGKILL to what is still there after `grace` s.

    `kill` is `os.kill` for single processes or `os.killpg` for process groups. Returns True when
    nothing is left.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        found = list(pids())
        if not found:
            return True
        for pid in found:
            try:
                kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            for pid in found:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            if not list(pids()):
                return True
            time.sleep(poll)
    return not list(pids())


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
