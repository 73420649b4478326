"""One command at a time on a testbed: a sweep, `shape`, `calibrate`, `bench` or `down` on a testbed
another of them is using is refused with one line naming the holder.

The lock is an advisory `flock` on `/run/testbed/PREFIX.lock` (of the control machine, also for a
real lab): the kernel releases it when its holder dies however it dies, so a lock left by a killed
process is simply taken over. The file names its holder for the refusal, and goes when it is released.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contracts.errors import UserError

LOCK_DIR = Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed"))


@contextmanager
def held(prefix: str, what: str, lock_dir: Path | None = None) -> Iterator[None]:
    """Hold the testbed `prefix` for `what` (e.g. "testbed sweep experiments/smoke.yaml")."""
    directory = lock_dir or LOCK_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{prefix}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise UserError(
            f"testbed {prefix!r} is in use by {holder}", "wait for it to finish (or stop it), then try again"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({what})".encode(), 0)
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)  # releases the lock
