"""Background services on a host (offload server, iperf3 server): start, find, stop by pid file.

Each service runs in its own session, logged to a file, and is found again by its pid file after a
crash of the orchestrator, so `down` can always stop it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from contracts.processes import alive, stop_group


def pidfile(state_dir: Path, name: str) -> Path:
    return Path(state_dir) / "services" / f"{name}.pid"


def logfile(state_dir: Path, name: str) -> Path:
    return Path(state_dir) / "logs" / f"{name}.log"


def start(state_dir: Path, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    stop(state_dir, name)
    log = logfile(state_dir, name)
    log.parent.mkdir(parents=True, exist_ok=True)
    pidfile(state_dir, name).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    pidfile(state_dir, name).write_text(str(proc.pid))
    return proc.pid


def pid_of(state_dir: Path, name: str) -> int | None:
    try:
        pid = int(pidfile(state_dir, name).read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def stop(state_dir: Path, name: str) -> bool:
    """Stop the service and its whole process group; True when one was running."""
    pid = pid_of(state_dir, name)
    if pid is not None:
        stop_group(pid)
    pidfile(state_dir, name).unlink(missing_ok=True)
    return pid is not None
