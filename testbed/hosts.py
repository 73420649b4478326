"""The one interface the orchestrator uses to act on a host: commands, the host agent, services.

A host is reached in one of two ways, and that is all a backend supplies (`_exec`, `_popen`,
`python`): the embedded testbed enters a network namespace on this machine (`NetnsHost`), a real
lab goes over SSH (`testbed.ssh.SshHost`). Everything else (the agent's JSON protocol, the device's
CPU limit, services) is written once, here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from contracts.command import Result, run
from contracts.errors import CommandError, UserError
from testbed.inventory import HostSpec


class Host(ABC):
    """A testbed host. `limited` selects the device's CPU limit (on by default where the host has one)."""

    spec: HostSpec
    state_dir: Path | PurePosixPath  # where the host keeps the tool's state: pid files, logs, records
    cgroup: str | None  # the client's CPU limit, which its commands run in unless limited=False
    env: dict[str, str]  # for every command and service (BLAS thread caps on the client)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def role(self) -> str:
        return self.spec.role

    @property
    @abstractmethod
    def where(self) -> str:
        """Where the host is, for people: a namespace, or user@address."""

    # ---------------------------------------------------------------- how the host is reached
    @abstractmethod
    def _exec(
        self, argv: list[str], *, timeout: float | None, env: Mapping[str, str], input: str | None
    ) -> Result: ...

    @abstractmethod
    def _popen(self, argv: list[str], env: Mapping[str, str], **kwargs) -> subprocess.Popen: ...

    @abstractmethod
    def python(self, module: str, *args: str) -> list[str]:
        """argv that runs one of the project's modules (`python -m client ...`) on this host."""

    def limited(self, argv: Sequence[str], limited: bool | None = None) -> list[str]:
        """argv run inside the device's CPU limit (where the host has one and `limited` is not False)."""
        argv = [str(a) for a in argv]
        if self.cgroup and limited is not False:
            return self.python("client.cpulimit", "--name", self.cgroup, "--", *argv)
        return argv

    # ---------------------------------------------------------------- written once for both backends

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        limited: bool | None = None,
        input: str | None = None,
    ) -> Result:
        result = self._exec(
            self.limited(argv, limited), timeout=timeout, env={**self.env, **(env or {})}, input=input
        )
        return result.check() if check else result

    def popen(self, argv: Sequence[str], *, limited: bool | None = None, **kwargs) -> subprocess.Popen:
        """A process with pipes, for streaming work (the sweep's trial worker, `testbed exec`)."""
        env = {**self.env, **(kwargs.pop("env", None) or {})}
        return self._popen(self.limited(argv, limited), env, **kwargs)

    def agent(self, verb: str, *, timeout: float = 120.0, **args: Any) -> Any:
        """Ask the host agent (`python -m agent VERB`); its answer's result, or its error raised."""
        result = self._agent_exec(verb, json.dumps(args, default=str), timeout)
        return agent_answer(self.name, result)

    def _agent_exec(self, verb: str, payload: str, timeout: float) -> Result:
        return self._exec(self.python("agent", verb), timeout=timeout, env={}, input=payload)

    def start(self, service: str, argv: Sequence[str]) -> int:
        """A background service (never CPU-limited) in its own session; `stop` finds it after a crash."""
        return self.agent(
            "service.start",
            dir=str(self.state_dir),
            name=f"{self.name}-{service}",
            argv=[str(a) for a in argv],
            env=self.env,
        )

    def stop(self, service: str) -> bool:
        return self.agent("service.stop", dir=str(self.state_dir), name=f"{self.name}-{service}")

    def service_pid(self, service: str) -> int | None:
        return self.agent("service.status", dir=str(self.state_dir), name=f"{self.name}-{service}")


def agent_answer(host: str, result: Result) -> Any:
    """The agent's JSON answer: its result, a UserError for the user's problem, a CommandError for a bug."""
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else None
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict) or "ok" not in answer:
        raise CommandError(host, result.argv, result.returncode, result.stderr or result.stdout)
    if not answer["ok"]:
        raise UserError(f"on {host}: {answer['error']}", answer.get("fix"))
    return answer.get("result")


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
        cgroup: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self.netns = netns
        self.state_dir = state_dir
        self.cgroup = cgroup
        self.env = {"PATH": project_path(), **(env or {})}

    @property
    def where(self) -> str:
        return f"netns {self.netns}"

    def python(self, module: str, *args: str) -> list[str]:
        return [sys.executable, "-m", module, *args]

    def _netns(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def limited(self, argv: Sequence[str], limited: bool | None = None) -> list[str]:
        """Join the cgroup here, then enter the namespace: `ip netns exec` mounts a /sys of the
        namespace's own, without the cgroup file system, so nothing inside could join it."""
        argv = [str(a) for a in argv]
        if self.cgroup and limited is not False:
            return [*self.python("client.cpulimit", "--name", self.cgroup, "--"), *self._netns(argv)]
        return self._netns(argv)

    def _exec(self, argv, *, timeout, env, input) -> Result:
        return run(argv, host=self.name, check=False, timeout=timeout, env=env, input=input)

    def _popen(self, argv, env, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(argv, env={**os.environ, **env}, **kwargs)

    def _agent_exec(self, verb: str, payload: str, timeout: float) -> Result:
        """In the namespace when it exists and the verb needs its network; otherwise here.

        Only the network differs between this machine and its namespaces: a plan, a probe taken
        before `up` or after `down`, and the cgroup (whose file system `ip netns exec` hides) are the
        host's own here. A verb that needs the network of a namespace that is not there fails as it
        should (no such port).
        """
        argv = self.python("agent", verb)
        inside = os.geteuid() == 0 and Path(f"/run/netns/{self.netns}").exists()
        if inside and not verb.startswith("cpu."):
            argv = self._netns(argv)
        return run(argv, host=self.name, check=False, timeout=timeout, input=payload)
