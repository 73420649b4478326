"""A fake host for testing the orchestration without root: it records every agent call and command
and answers from a script, through the same JSON protocol and `Host` code paths as a real host."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from contracts.command import Result
from contracts.errors import UserError
from testbed.hosts import Host
from testbed.inventory import HostSpec

AgentReply = Any | Callable[..., Any]  # a value, or a function of the verb's arguments (may raise)
CommandReply = Callable[[list[str]], tuple[int, str]]


class FakeHost(Host):
    def __init__(
        self,
        spec: HostSpec,
        state_dir: str = "/run/testbed/fake",
        code_dir: str = "/var/lib/testbed/fake/src",
        cgroup: str | None = None,
        env: dict | None = None,
    ) -> None:
        self.spec = spec
        self.state_dir = PurePosixPath(state_dir)
        self.code_dir = PurePosixPath(code_dir)
        self.cgroup = cgroup
        self.env = dict(env or {})
        self.calls: list[tuple] = []  # ("agent", verb, args) and ("run", argv), in order
        self.replies: dict[str, AgentReply] = {}
        self.commands: list[tuple[tuple[str, ...], CommandReply]] = []
        self.files: dict[str, bytes] = {}

    # ---------------------------------------------------------------- scripting
    def reply(self, verb: str, value: AgentReply) -> FakeHost:
        self.replies[verb] = value
        return self

    def on(self, *prefix: str, answer: CommandReply | tuple[int, str]) -> FakeHost:
        """Commands starting with `prefix` get `answer` (exit status, stdout); others succeed silently."""
        self.commands.insert(0, (prefix, answer if callable(answer) else (lambda argv, a=answer: a)))
        return self

    # ---------------------------------------------------------------- what the tests read
    def verbs(self) -> list[str]:
        return [c[1] for c in self.calls if c[0] == "agent"]

    def args(self, verb: str) -> list[dict]:
        return [c[2] for c in self.calls if c[0] == "agent" and c[1] == verb]

    def ran(self, *prefix: str) -> list[list[str]]:
        return [c[1] for c in self.calls if c[0] == "run" and tuple(c[1][: len(prefix)]) == prefix]

    # ---------------------------------------------------------------- Host
    @property
    def where(self) -> str:
        return f"fake {self.name}"

    def python(self, module: str, *args: str) -> list[str]:
        return ["python", "-m", module, *args]

    def _agent_exec(self, verb: str, payload: str, timeout: float) -> Result:
        args = json.loads(payload)
        self.calls.append(("agent", verb, args))
        reply = self.replies.get(verb)
        try:
            result = reply(**args) if callable(reply) else reply
            answer, status = {"ok": True, "result": result}, 0
        except UserError as exc:
            answer, status = {"ok": False, "error": exc.message, "fix": exc.fix}, 2
        return Result(self.name, self.python("agent", verb), status, json.dumps(answer) + "\n", "")

    def _exec(self, argv, *, timeout, env, input) -> Result:
        self.calls.append(("run", list(argv)))
        for prefix, answer in self.commands:
            if tuple(argv[: len(prefix)]) == prefix:
                status, out = answer(list(argv))
                return Result(self.name, list(argv), status, out, "" if status == 0 else out)
        return Result(self.name, list(argv), 0, "", "")

    def _popen(self, argv, env, **kwargs):
        raise NotImplementedError("script a worker for the sweep's tests")

    # ---------------------------------------------------------------- files (SSH records)
    def write(self, data: bytes, dst: str) -> None:
        self.files[dst] = data

    def read(self, path: str) -> str | None:
        return self.files[path].decode() if path in self.files else None

    def close(self) -> None:
        pass


def probe_reply(**overrides) -> Callable[..., dict]:
    """An agent `probe` that finds everything it is asked for (overrides say what is different)."""

    def probe(programs=(), interfaces=(), cgroup=False) -> dict:
        out = {
            "root": True,
            "programs": {p: f"/usr/bin/{p}" for p in programs},
            "interfaces": dict.fromkeys(interfaces, True),
            "python_modules": {"numpy": True},
            "ovs_kernel_module": False,
            "ovs_schema": True,
            "system_ovs": False,
            "tun": True,
        }
        if cgroup:
            out["cgroup"] = 2
        return {**out, **overrides}

    return probe
