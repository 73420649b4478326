"""The one interface the orchestrator uses to act on a host: run, start/stop a service, copy a file.

The embedded testbed implements it with network namespaces on this machine (`NetnsHost`); the SSH
backend of a real lab implements the same methods, so nothing above this module knows which it is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path

from client.cpulimit import CpuLimit
from contracts.command import Result, run
from testbed import service as service_mod
from testbed.inventory import HostSpec


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
    def service_pid(self, service: str) -> int | None: ...

    @abstractmethod
    def put(self, src: Path, dst: str) -> None: ...

    @property
    @abstractmethod
    def where(self) -> str:
        """Where the host is, for people: a namespace, or user@address."""

    def python(self, module: str, *args: str) -> list[str]:
        """argv that runs one of the project's role modules (`python -m client ...`) on this host."""
        return [sys.executable, "-m", module, *args]


def blas_env(threads: int, core: str | None = None) -> dict[str, str]:
    """Cap every BLAS/OpenMP flavour numpy may be linked against, so the device model holds."""
    n = str(threads)
    keys = (
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "BLIS_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "NUMEXPR_NUM_THREADS",
    )
    env = dict.fromkeys(keys, n)
    if core:
        env["OPENBLAS_CORETYPE"] = core
    return env


def project_path() -> str:
    """PATH with the project's interpreter first, so `testbed exec client -- python -m client ...`
    runs the Python that has the project and its dependencies, as the tool's own commands do."""
    bindir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", os.defpath)
    return path if path.split(os.pathsep)[0] == bindir else bindir + os.pathsep + path


class NetnsHost(Host):
    """A host that is a network namespace on this machine."""

    def __init__(
        self,
        spec: HostSpec,
        netns: str,
        state_dir: Path,
        cpu_limit: CpuLimit | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self.netns = netns
        self.state_dir = state_dir
        self.cpu_limit = cpu_limit
        self.env = {"PATH": project_path(), **(env or {})}

    @property
    def where(self) -> str:
        return f"netns {self.netns}"

    def _argv(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *[str(a) for a in argv]]

    def _preexec(self, limited: bool | None):
        if self.cpu_limit is None or limited is False:
            return None
        return self.cpu_limit.join_self

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        return {**self.env, **(env or {})}

    def run(self, argv, *, check=True, timeout=None, env=None, limited=None, input=None) -> Result:
        return run(
            self._argv(argv),
            host=self.name,
            check=check,
            timeout=timeout,
            env=self._env(env),
            input=input,
            preexec_fn=self._preexec(limited),
        )

    def popen(self, argv, *, limited=None, **kwargs) -> subprocess.Popen:
        env = {**os.environ, **self._env(kwargs.pop("env", None))}
        return subprocess.Popen(self._argv(argv), env=env, preexec_fn=self._preexec(limited), **kwargs)

    def log_path(self, service: str) -> Path:
        return service_mod.logfile(self.state_dir, f"{self.name}-{service}")

    def start(self, service, argv, *, limited=None) -> int:
        """A background service in its own session; its pid file lets `stop` find it, also after a crash."""
        return service_mod.start(
            self.state_dir,
            f"{self.name}-{service}",
            self._argv(argv),
            env=self.env,
            preexec_fn=self._preexec(limited),
        )

    def service_pid(self, service: str) -> int | None:
        return service_mod.pid_of(self.state_dir, f"{self.name}-{service}")

    def stop(self, service) -> None:
        service_mod.stop(self.state_dir, f"{self.name}-{service}")

    def put(self, src, dst) -> None:
        # Namespaces share this machine's filesystem: a copy is a plain copy.
        shutil.copyfile(src, dst)
