"""Background services on a host (offload server, iperf3 server): start, find, stop by pid file.

Used in-process by the namespace backend and as `python -m testbed.service` on SSH hosts, so both
keep their services the same way: in their own session, logged to a file, found again after a crash.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from contracts.command import split_command


def pidfile(state_dir: Path, name: str) -> Path:
    return Path(state_dir) / "services" / f"{name}.pid"


def logfile(state_dir: Path, name: str) -> Path:
    return Path(state_dir) / "logs" / f"{name}.log"


def start(
    state_dir: Path,
    name: str,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> int:
    stop(state_dir, name)
    log = logfile(state_dir, name)
    log.parent.mkdir(parents=True, exist_ok=True)
    pidfile(state_dir, name).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
    pidfile(state_dir, name).write_text(str(proc.pid))
    return proc.pid


def pid_of(state_dir: Path, name: str) -> int | None:
    try:
        pid = int(pidfile(state_dir, name).read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def stop(state_dir: Path, name: str) -> None:
    pid = pid_of(state_dir, name)
    if pid is not None:
        terminate_group(pid)
    pidfile(state_dir, name).unlink(missing_ok=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def terminate_group(pid: int, grace: float = 5.0) -> None:
    """SIGTERM the process group led by `pid`, then SIGKILL what is left after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not alive(pid):
                return
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.service", description=__doc__)
    parser.add_argument("action", choices=("start", "stop", "pid"))
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--name", required=True)
    options, cmd = split_command(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(options)
    if args.action == "start":
        if not cmd:
            parser.error("start needs a command after --")
        print(start(args.dir, args.name, cmd))
    elif args.action == "stop":
        stop(args.dir, args.name)
    else:
        pid = pid_of(args.dir, args.name)
        print(pid or "")
        return 0 if pid else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
