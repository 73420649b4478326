"""The slow device: a CPU limit on the client's processes through a cgroup.

Works with cgroup v1 (`cpu.cfs_quota_us` / `cpu.cfs_period_us`) and v2 (`cpu.max`), whichever the
machine has. The period is the shortest whose quota is the kernel's smallest, 1 ms: the kernel grants
a quota once per period, so work shorter than a few periods can run at full speed inside one quota;
the shorter the period, the shorter the work the limit slows faithfully (measured: 0.04 of a core,
work of 500 ms target, -6% with a 25 ms period against -19% with 100 ms; `client.throttle` then
removes the rest of the error by starting each timed stage at a known point of a period).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from contracts.cpu_lock import CGROUP_ENV  # `main` sets it for its command: the cgroup's directory
from contracts.errors import UserError
from contracts.processes import stop_all
from contracts.profiles import quota_period

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Write:
    path: Path
    value: str

    def __str__(self) -> str:
        return f"echo {self.value} > {self.path}"


def detect_version(root: Path = CGROUP_ROOT) -> int:
    """2 on a unified hierarchy with the cpu controller, 1 where the v1 cpu controller is mounted."""
    if (root / "cpu" / "cpu.cfs_quota_us").exists():
        return 1
    controllers = root / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return 2
    raise UserError(
        "this machine has no cgroup cpu controller (neither v1 cpu.cfs_quota_us nor v2 cpu.max)",
        "enable the cgroup cpu controller, or remove client_cpu.cpu_quota from the inventory",
    )


class CpuLimit:
    """A cgroup named after the testbed's prefix, holding the client's processes."""

    def __init__(
        self,
        name: str,
        fraction: float,
        root: Path = CGROUP_ROOT,
        version: int | None = None,
        path: Path | None = None,
    ) -> None:
        """`path`: an existing cgroup (a process's own, as `main` hands it down), whose parent is not
        ours to set up; else the cgroup `name` under `root`, made by `apply`."""
        self.name = name
        self.fraction = fraction
        self.root = root
        self.made = path is None
        if path is None:
            self.version = version or detect_version(root)
            self.path = root / "cpu" / name if self.version == 1 else root / name
        else:
            self.version = version or (1 if (path / "cpu.cfs_quota_us").exists() else 2)
            self.path = path

    @classmethod
    def own(cls, fraction: float = 1.0) -> CpuLimit | None:
        """The limit this process runs under, if `main` started it (None otherwise)."""
        path = os.environ.get(CGROUP_ENV)
        return cls(Path(path).name, fraction, path=Path(path)) if path else None

    def plan(self) -> list[Write]:
        quota, period = quota_period(self.fraction)
        if self.version == 1:
            # period first: the kernel checks the quota against the period in force
            return [
                Write(self.path / "cpu.cfs_period_us", str(period)),
                Write(self.path / "cpu.cfs_quota_us", str(quota)),
            ]
        enable = [Write(self.root / "cgroup.subtree_control", "+cpu")] if self.made else []
        return [*enable, Write(self.path / "cpu.max", f"{quota} {period}")]

    def apply(self) -> None:
        if self.made:
            self.path.mkdir(exist_ok=True)
        for write in self.plan():
            if write.path.name == "cgroup.subtree_control" and "cpu" in write.path.read_text().split():
                continue
            write.path.write_text(write.value)

    def exists(self) -> bool:
        return self.path.is_dir()

    def read(self) -> dict:
        """The limit in force, as the kernel reports it."""
        if not self.exists():
            return {}
        if self.version == 1:
            quota = int((self.path / "cpu.cfs_quota_us").read_text())
            period = int((self.path / "cpu.cfs_period_us").read_text())
        else:
            q, p = (self.path / "cpu.max").read_text().split()
            quota, period = (-1 if q == "max" else int(q)), int(p)
        fraction = None if quota < 0 else quota / period
        return {"cgroup": str(self.path), "quota_us": quota, "period_us": period, "fraction": fraction}

    def join_self(self) -> None:
        """Move the calling process into the cgroup (its children inherit it)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def remove(self) -> None:
        """Kill what is still inside, then remove the cgroup; a no-op when it does not exist."""
        if not self.exists():
            return
        stop_all(self.pids, grace=2.5)
        try:
            self.path.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise UserError(
                f"cannot remove cgroup {self.path}: {exc.strerror}",
                "stop the processes still in it, then run testbed down again",
            ) from exc


def main(argv: list[str] | None = None) -> int:
    """`python -m client.cpulimit --name CGROUP -- CMD...`: run CMD inside the client's CPU limit.

    How every backend runs a command on the device: this process joins the cgroup, then becomes
    CMD, so the limit covers CMD from its first instruction (and this wrapper's start-up does not
    count against the device).
    """
    import argparse
    import sys

    from contracts.command import split_command

    parser = argparse.ArgumentParser(prog="python -m client.cpulimit")
    parser.add_argument("--name", required=True, help="the cgroup (the agent's cpu.apply made it)")
    options, cmd = split_command(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(options)
    if not cmd:
        parser.error("give the command after --")
    try:
        CpuLimit(args.name, 1.0).join_self()
    except (UserError, OSError) as exc:
        print(f"cpulimit: error: cannot join cgroup {args.name}: {exc}", file=sys.stderr)
        return 2
    # the cgroup's directory stays open across exec, so CMD reaches it through /proc/self/fd even where
    # /sys/fs/cgroup is out of sight: a timed stage reads its period, a throttled worker sets its quotas
    fd = os.open(CpuLimit(args.name, 1.0).path, os.O_RDONLY | os.O_DIRECTORY)
    os.set_inheritable(fd, True)
    os.environ[CGROUP_ENV] = f"/proc/self/fd/{fd}"
    os.execvp(cmd[0], cmd)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
