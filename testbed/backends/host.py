"""The one interface the orchestrator uses to act on a host: commands, the host agent, services.

A host is reached in one of two ways, and that is all a backend supplies (`_exec`, `_popen`,
`python`, and how its resident agent is started, `_agent_exec`): the embedded testbed enters a
network namespace on this machine (`NetnsHost`), a real lab goes over SSH (`testbed.backends.ssh_host.SshHost`).
Everything else (the agent's answers, the device's CPU limit, services) is written once, here.
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
from contracts.errors import AgentBug, UserError
from testbed.backends.agent_link import AgentLink, local_spawn
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
        """Ask the host's resident agent (`python -m agent --serve`); its answer's result, a UserError
        for the user's problem, an AgentBug for a bug."""
        result = self._agent_exec(verb, json.dumps(args, default=str), timeout)
        return agent_answer(self.name, result)

    @abstractmethod
    def _agent_exec(self, verb: str, payload: str, timeout: float) -> Result:
        """The agent's answer line to `verb` with the arguments `payload` (a JSON object), as a Result
        whose argv ends with the verb."""

    @abstractmethod
    def close(self) -> None:
        """End what the host keeps open for the command (its agent, a connection); used again, it
        opens them afresh."""

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
    """The agent's JSON answer: its result, a UserError for the user's problem, an AgentBug for a bug.

    An answer that is not one (not JSON, not an object with `ok`) breaks the protocol: a bug too.
    """
    verb = result.argv[-1] if result.argv else "?"
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else None
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict) or "ok" not in answer:
        output = (result.stdout + result.stderr).strip()[-2000:] or "(nothing)"
        raise AgentBug(host, verb, f"not an answer (exit status {result.returncode}): {output}")
    if answer["ok"]:
        return answer.get("result")
    if "bug" in answer:
        raise AgentBug(host, answer.get("verb") or verb, answer["bug"])
    raise UserError(f"on {host}: {answer['error']}", answer.get("fix"))


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
        self._here: AgentLink | None = None
        self._inside: AgentLink | None = None
        self._inside_ns: tuple[int, int] | None = None  # which namespace of that name it is in

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

    def write(self, data: bytes, dst: str) -> None:
        """A file of the host's (namespaces share this machine's file system)."""
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        Path(dst).write_bytes(data)

    def _popen(self, argv, env, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(argv, env={**os.environ, **env}, **kwargs)

    def _agent_exec(self, verb: str, payload: str, timeout: float) -> Result:
        """In the namespace when it exists and the verb needs its network; otherwise here.

        Only the network differs between this machine and its namespaces: a plan, a probe taken
        before `up` or after `down`, and the cgroup (whose file system `ip netns exec` hides) are the
        host's own here. A verb that needs the network of a namespace that is not there fails as it
        should (no such port). So there are two resident agents, each started on its first verb; the
        one inside is replaced when the namespace of that name is another (removed, made again).
        """
        namespace = self._namespace_id() if not verb.startswith("cpu.") else None
        if namespace is None:
            if self._here is None:
                self._here = self._link(self.python("agent", "--serve"))
            return self._here.ask(verb, payload, timeout)
        if self._inside is not None and self._inside_ns != namespace:
            self._inside.close()
            self._inside = None
        if self._inside is None:
            self._inside = self._link(self._netns(self.python("agent", "--serve")))
            self._inside_ns = namespace
        return self._inside.ask(verb, payload, timeout)

    def _namespace_id(self) -> tuple[int, int] | None:
        """The namespace's identity (its nsfs inode), or None where it is not there to enter."""
        if os.geteuid() != 0:
            return None
        try:
            st = os.stat(f"/run/netns/{self.netns}")
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _link(self, argv: list[str]) -> AgentLink:
        return AgentLink(self.name, argv, local_spawn(argv))

    @property
    def agents(self) -> list[AgentLink]:
        """The host's agent links (here, in the namespace) that were started."""
        return [link for link in (self._here, self._inside) if link is not None]

    def close(self) -> None:
        for link in self.agents:
            link.close()
        self._here = self._inside = None
