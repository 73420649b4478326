"""The one interface the orchestrator uses to act on a host: run, start/stop a service, copy a file.

The embedded testbed implements it with network namespaces on this machine (`NetnsHost`); the SSH
backend of a real lab implements the same methods, so nothing above this module knows which it is.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path

from client.cpulimit import CpuLimit
from testbed.errors import UserError
from testbed.inventory import HostSpec
from testbed.runner import Result, run


class Host(ABC):
    """A testbed host. `limited` selects the device's CPU limit (on by default where the host has one)."""

    spec: HostSpec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def role(self) -> str:
        return self.spec.role

    @abstractmethod
    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        limited: bool | None = None,
        input: str | None = None,
    ) -> Result: ...

    @abstractmethod
    def popen(self, argv: Sequence[str], *, limited: bool | None = None, **kwargs) -> subprocess.Popen:
        """A process with pipes, for streaming work (the sweep's trial worker)."""

    @abstractmethod
    def start(self, service: str, argv: Sequence[str], *, limited: bool | None = None) -> int: ...

    @abstractmethod
    def stop(self, service: str) -> None: ...

    @abstractmethod
    def put(self, src: Path, dst: str) -> None: ...

    def python(self, module: str, *args: str) -> list[str]:
        """argv that runs one of the project's role modules (`python -m client ...`) on this host."""
        return [sys.executable, "-m", module, *args]


def blas_env(threads: int) -> dict[str, str]:
    """Cap every BLAS/OpenMP flavour numpy may be linked against, so the device model holds."""
    n = str(threads)
    keys = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
            "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
    return dict.fromkeys(keys, n)


class NetnsHost(Host):
    """A host that is a network namespace on this machine."""

    def __init__(self, spec: HostSpec, netns: str, state_dir: Path, cpu_limit: CpuLimit | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.netns = netns
        self.state_dir = state_dir
        self.cpu_limit = cpu_limit
        self.env = dict(env or {})

    def _argv(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *[str(a) for a in argv]]

    def _preexec(self, limited: bool | None):
        if self.cpu_limit is None or limited is False:
            return None
        return self.cpu_limit.join_self

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        return {**self.env, **(env or {})}

    def run(self, argv, *, check=True, timeout=None, env=None, limited=None, input=None) -> Result:
        return run(self._argv(argv), host=self.name, check=check, timeout=timeout, env=self._env(env),
                   input=input, preexec_fn=self._preexec(limited))

    def popen(self, argv, *, limited=None, **kwargs) -> subprocess.Popen:
        env = {**os.environ, **self._env(kwargs.pop("env", None))}
        return subprocess.Popen(self._argv(argv), env=env, preexec_fn=self._preexec(limited), **kwargs)

    def _pidfile(self, service: str) -> Path:
        return self.state_dir / "services" / f"{self.name}-{service}.pid"

    def log_path(self, service: str) -> Path:
        return self.state_dir / "logs" / f"{self.name}-{service}.log"

    def start(self, service, argv, *, limited=None) -> int:
        """Start a background service in its own session; its pid is recorded so `stop` finds it."""
        self.stop(service)
        log = self.log_path(service)
        log.parent.mkdir(parents=True, exist_ok=True)
        self._pidfile(service).parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(self._argv(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, **self.env}, start_new_session=True,
                                    preexec_fn=self._preexec(limited))
        self._pidfile(service).write_text(str(proc.pid))
        return proc.pid

    def service_pid(self, service: str) -> int | None:
        try:
            pid = int(self._pidfile(service).read_text())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def stop(self, service) -> None:
        pid = self.service_pid(service)
        if pid is not None:
            terminate_group(pid)
        self._pidfile(service).unlink(missing_ok=True)

    def put(self, src, dst) -> None:
        # Namespaces share this machine's filesystem: a copy is a plain copy.
        shutil.copyfile(src, dst)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def terminate_group(pid: int, grace: float = 5.0) -> None:
    """SIGTERM the process group led by `pid`, then SIGKILL what is left after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError as exc:
            raise UserError(f"not allowed to stop process {pid}", "run testbed as root") from exc
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            _reap(pid)
            if not _alive(pid):
                return
            time.sleep(0.05)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
