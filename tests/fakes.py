"""A fake host for testing the orchestration without root: it records every agent call and command
and answers from a script, through the same JSON protocol and `Host` code paths as a real host; its
`popen` starts a scripted trial worker (`FakeWorker`) that speaks `client.worker`'s protocol."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import traceback
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from contracts.command import Result
from contracts.errors import UserError
from testbed.hosts import Host
from testbed.inventory import HostSpec

AgentReply = Any | Callable[..., Any]  # a value, or a function of the verb's arguments (may raise)
CommandReply = Callable[[list[str]], tuple[int, str]]
WorkerScript = Callable[[dict], dict | str]  # a trial spec -> the worker's answer (a record, or a raw line)


class WorkerExit(Exception):
    """Raised by a worker script: the worker exits with `status` instead of answering (EOF on its stdout)."""

    def __init__(self, status: int = 1, message: str = "") -> None:
        super().__init__(message)
        self.status = status


class WorkerHang(Exception):
    """Raised by a worker script: the worker stops answering and stays alive until it is killed."""


class FakeWorker:
    """A process as `subprocess.Popen(stdin=PIPE, stdout=PIPE)` gives it, running `client.worker`'s
    protocol: one line `{"ready": true}`, then for each JSON line on its stdin one line, `script(spec)`.

    The pipes are real (os.pipe) and a thread is the process, so it ends the ways a process does:
    closing its stdin ends it with status 0; `kill` ends it with -9; once ended, its stdout gives EOF
    and writing to its stdin breaks the pipe. What the script raises decides the rest:
    `WorkerExit(status)` exits at once; `WorkerHang` stops answering until killed; `KeyboardInterrupt`
    is Ctrl-C during the trial (the signal `interrupt` to this process, the orchestrator, while the
    trial stays unanswered); any other exception exits 1 with its traceback on stderr.
    """

    def __init__(self, argv: list[str], script: WorkerScript, stderr=None, interrupt: int = signal.SIGINT):
        self.args = list(argv)
        self.script = script
        self.interrupt = interrupt
        self.specs: list[dict] = []  # the trials it was sent, in order
        self.returncode: int | None = None
        self._stderr = stderr if hasattr(stderr, "write") else None
        self._ended = threading.Event()
        self._lock = threading.Lock()
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        self.stdin, self.stdout = open(stdin_w, "wb"), open(stdout_r, "rb")
        self._requests, self._answers = open(stdin_r, "rb"), open(stdout_w, "wb")
        threading.Thread(target=self._main, name=f"fake worker {id(self):x}", daemon=True).start()

    # ---------------------------------------------------------------- the process
    def _main(self) -> None:
        status = 0
        try:
            self._say({"ready": True})
            for line in iter(self._requests.readline, b""):
                if self.returncode is not None:  # killed: nothing more is read or answered
                    break
                if not line.strip():
                    continue
                spec = json.loads(line)
                self.specs.append(spec)
                try:
                    answer = self.script(spec)
                except WorkerExit as exc:
                    self._complain(f"{exc}\n" if str(exc) else "")
                    status = exc.status
                    break
                except WorkerHang:
                    self._ended.wait()
                    break
                except KeyboardInterrupt:
                    # to the main thread, as a terminal's Ctrl-C reaches the orchestrator: sent to the
                    # process, the kernel may hand it to another thread (gRPC's, a pump), and the main
                    # thread's wait is then not interrupted
                    signal.pthread_kill(threading.main_thread().ident, self.interrupt)
                    continue
                except Exception:
                    self._complain(traceback.format_exc())
                    status = 1
                    break
                self._say(answer)
        finally:
            self._requests.close()
            self._end(status)

    def _say(self, answer: dict | str) -> None:
        line = answer if isinstance(answer, str) else json.dumps(answer)
        with self._lock:
            if self.returncode is None:
                self._answers.write(line.encode() + b"\n")
                self._answers.flush()

    def _complain(self, text: str) -> None:
        if self._stderr is not None and text:
            self._stderr.write(text.encode())
            self._stderr.flush()

    def _end(self, status: int) -> None:
        with self._lock:
            if self.returncode is None:
                self.returncode = status
                self._answers.close()
                self._ended.set()

    # ---------------------------------------------------------------- Popen
    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def kill(self) -> None:
        self._end(-signal.SIGKILL)


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
        self.replies: dict[str, AgentReply] = {"grpc.ready": True}  # the server's gRPC port answers
        self.commands: list[tuple[tuple[str, ...], CommandReply]] = []
        self.files: dict[str, bytes] = {}
        self.workers: list[FakeWorker] = []  # every process `popen` started, in order
        self._worker: tuple[WorkerScript, int] | None = None

    # ---------------------------------------------------------------- scripting
    def reply(self, verb: str, value: AgentReply) -> FakeHost:
        self.replies[verb] = value
        return self

    def on(self, *prefix: str, answer: CommandReply | tuple[int, str]) -> FakeHost:
        """Commands starting with `prefix` get `answer` (exit status, stdout); others succeed silently."""
        self.commands.insert(0, (prefix, answer if callable(answer) else (lambda argv, a=answer: a)))
        return self

    def worker(self, script: WorkerScript, interrupt: int = signal.SIGINT) -> FakeHost:
        """`popen` starts a `FakeWorker` that answers with `script` (each process afresh, as a restart)."""
        self._worker = (script, interrupt)
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
        self.last_input = input  # what the command read on stdin, for answers that depend on it
        for prefix, answer in self.commands:
            if tuple(argv[: len(prefix)]) == prefix:
                status, out = answer(list(argv))
                return Result(self.name, list(argv), status, out, "" if status == 0 else out)
        return Result(self.name, list(argv), 0, "", "")

    def _popen(self, argv, env, **kwargs) -> FakeWorker:
        self.calls.append(("popen", list(argv)))
        if self._worker is None:
            raise NotImplementedError("no worker scripted: call host.worker(script) first")
        if kwargs.get("stdin") != subprocess.PIPE or kwargs.get("stdout") != subprocess.PIPE:
            raise NotImplementedError("the fake worker speaks through pipes: stdin=PIPE, stdout=PIPE")
        script, interrupt = self._worker
        proc = FakeWorker(list(argv), script, kwargs.get("stderr"), interrupt)
        self.workers.append(proc)
        return proc

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
