"""The one interface the orchestrator uses to act on a host: commands, the host agent, services.

A host is reached in one of two ways, and that is all a backend supplies (`_exec`, `_popen`,
`python`, and how its resident agent is started, `_agent_exec`): the embedded testbed enters a
network namespace on this machine (`testbed.backends.netns.NetnsHost`), a real lab goes over SSH (`testbed.backends.ssh_host.SshHost`).
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
from typing import Any, TypeVar

from contracts.agent_api import Request, ServiceStart, ServiceStatus, ServiceStop
from contracts.command import Result
from contracts.errors import AgentBug, UserError
from contracts.message import decode
from testbed.inventory import HostSpec

A = TypeVar("A")


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

    def agent(self, request: Request[A], *, timeout: float = 120.0) -> A:
        """Ask the host's resident agent (`python -m agent --serve`) one request (a type of
        `contracts.agent_api`); its typed answer, a UserError for the user's problem, an AgentBug for
        a bug (an answer that is not of the verb's answer type is one too)."""
        result = self._agent_exec(request.VERB, json.dumps(request.to_json()), timeout)
        return typed_answer(self.name, request, agent_answer(self.name, result))

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
            ServiceStart(
                dir=str(self.state_dir),
                name=f"{self.name}-{service}",
                argv=tuple(str(a) for a in argv),
                env=self.env,
            )
        )

    def stop(self, service: str) -> bool:
        return self.agent(ServiceStop(dir=str(self.state_dir), name=f"{self.name}-{service}"))

    def service_pid(self, service: str) -> int | None:
        return self.agent(ServiceStatus(dir=str(self.state_dir), name=f"{self.name}-{service}"))


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


def typed_answer(host: str, request: Request[A], result: Any) -> A:
    """The agent's result as the request's answer type; one that does not fit is the agent's bug."""
    try:
        return decode(request.ANSWER, result)
    except (TypeError, ValueError) as exc:
        raise AgentBug(host, request.VERB, f"an answer that is not a {request.ANSWER}: {exc}") from None


def project_path() -> str:
    """PATH with the project's interpreter first, so `testbed exec client -- python -m client ...`
    runs the Python that has the project and its dependencies, as the tool's own commands do."""
    bindir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", os.defpath)
    return path if path.split(os.pathsep)[0] == bindir else bindir + os.pathsep + path
