"""The orchestrator's end of a resident host agent (`python -m agent --serve`): a verb per JSON line.

A process per verb costs an interpreter's start (~200 ms, plus a connection over SSH); one agent per
host for the life of the command answers in well under a millisecond. How the process is started
(`ip netns exec`, an SSH channel) is the host's business: it hands over a function that starts one.

The link starts its agent on the first verb, and again when the agent was found dead before a verb
was sent (the verb never reached it, so nothing is done twice). An agent that dies during a verb, or
answers with something that is not an answer, is a bug (`AgentBug`), except when it never got as far
as saying it is ready because the host lacks its interpreter or a dependency: that is the user's to
fix. A verb past its timeout has its agent killed (the next verb starts a fresh one). Links still
open when the interpreter exits are closed then; an orchestrator that is killed closes their stdin
all the same, and the agents exit on that EOF.
"""

from __future__ import annotations

import atexit
import collections
import json
import queue
import re
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

from contracts.command import Result
from contracts.errors import AgentBug, CommandError, UserError

START_TIMEOUT = 60.0  # an agent's start: an interpreter and its imports, over SSH perhaps
CLOSE_TIMEOUT = 5.0
STDERR_LINES = 20  # of an agent's stderr, kept to tell why it died
MISSING = (126, 127)  # the shell's "cannot execute" and "not found"
# what a host runs of the project: one of these missing below the top is a bug (a module renamed or
# left out), not a dependency the user has to install
PROJECT_PACKAGES = ("contracts", "agent", "appliance", "client", "server")
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


class Process(Protocol):
    """What a link needs of its agent's process (subprocess.Popen, testbed.backends.ssh_host.RemoteProcess)."""

    stdin: object
    stdout: object

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class Tail:
    """The last lines an agent wrote to stderr (a file-like sink, for processes that drain their own)."""

    closed = False

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)

    def write(self, data: bytes) -> int:
        self.lines.extend(data.decode(errors="replace").splitlines())
        return len(data)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        return "\n".join(self.lines)


Spawn = Callable[[Tail], Process]


def local_spawn(argv: list[str]) -> Spawn:
    """How an agent on this machine (or in one of its namespaces) starts: pipes, and a session of its
    own, so Ctrl-C is the orchestrator's to handle, not its agents'."""

    def spawn(tail: Tail) -> subprocess.Popen:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    return spawn


_open: weakref.WeakSet[AgentLink] = weakref.WeakSet()


class AgentLink:
    """One host's resident agent; `ask` sends a verb and returns its answer line as a Result.

    `argv` is the agent's command line, for messages and for the Results (each Result's argv is it
    plus the verb asked, so `testbed.backends.host.agent_answer` can name the verb of an answer it cannot
    read).
    """

    def __init__(self, host: str, argv: list[str], spawn: Spawn) -> None:
        self.host = host
        self.argv = list(argv)
        self._spawn = spawn
        self._proc: Process | None = None
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._tail = Tail()
        self._lock = threading.Lock()
        self.pid: int | None = None  # the agent's pid on its host, from its ready line
        self.starts = 0
        _open.add(self)

    # ---------------------------------------------------------------- asking
    def ask(self, verb: str, payload: str, timeout: float) -> Result:
        request = f'{{"verb": {json.dumps(verb)}, "args": {payload}}}\n'.encode()
        with self._lock:
            try:
                if self._proc is None or self._proc.poll() is not None:
                    self._start()
                try:
                    self._send(request)
                except OSError:  # it died since: the verb never reached it, so a fresh one may have it
                    self._stop()
                    self._start()
                    self._send(request)
                line = self._read(verb, timeout)
            except BaseException:
                # interrupted (Ctrl-C) or failed: an answer still to come would be read as the next
                # verb's, so this agent is done with
                self._stop(kill=True)
                raise
        return Result(self.host, [*self.argv, verb], 0, line.decode(errors="replace"), "")

    def _send(self, request: bytes) -> None:
        self._proc.stdin.write(request)
        self._proc.stdin.flush()

    def _read(self, verb: str, timeout: float) -> bytes:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self._stop(kill=True)
            raise UserError(
                f"on {self.host}: the host agent's verb {verb} did not finish within {timeout:g} s "
                "(the agent was stopped; the next verb starts a new one)"
            ) from None
        if not line:
            status = self._exit_status()
            self._stop()
            raise AgentBug(
                self.host,
                verb,
                f"the agent (`{' '.join(self.argv)}`) exited with {status} before answering; its "
                f"stderr ends:\n{self._tail.text() or '(nothing)'}",
            )
        return line

    # ---------------------------------------------------------------- the process
    def _start(self) -> None:
        self._lines = queue.Queue()
        self._tail = Tail()
        self.starts += 1
        try:
            proc = self._spawn(self._tail)
        except FileNotFoundError as exc:
            raise UserError(
                f"on {self.host}: cannot start the host agent: {exc}", "run scripts/setup.sh"
            ) from exc
        self._proc = proc
        threading.Thread(target=self._pump, args=(proc, self._lines), daemon=True).start()
        stderr = getattr(proc, "stderr", None)
        if stderr is not None:
            threading.Thread(target=self._drain, args=(stderr, self._tail), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while True:  # what a login shell prints before the agent speaks is not the agent's
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._stop(kill=True)
                raise UserError(
                    f"on {self.host}: the host agent did not start within {START_TIMEOUT:g} s",
                    f"check that `{' '.join(self.argv)}` runs on the host",
                ) from None
            if not line:
                raise self._start_failure()
            try:
                ready = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(ready, dict) and ready.get("ready"):
                self.pid = ready.get("pid")
                return
            self._stop(kill=True)
            raise AgentBug(self.host, "(start)", f"the agent's first line is not `ready`: {line[:300]!r}")

    def _start_failure(self) -> Exception:
        """Why an agent exited before it was ready: a missing interpreter or module is the user's."""
        status = self._exit_status()
        self._stop()
        stderr = self._tail.text()
        missing = _MISSING_MODULE.search(stderr)
        if missing and missing.group(1).partition(".")[0] in PROJECT_PACKAGES and missing.group(1) != "agent":
            return AgentBug(
                self.host, "(start)", f"the agent cannot import the project's own code:\n{stderr}"
            )
        if status in MISSING or missing:
            return CommandError(
                self.host,
                self.argv,
                status,
                stderr,
                "install python3 and the project's dependencies on the host (scripts/setup.sh), or "
                "set the host's python in the inventory",
            )
        return AgentBug(self.host, "(start)", f"the agent exited with {status} at its start:\n{stderr}")

    def _exit_status(self) -> int | None:
        try:
            return self._proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return None

    # The reading threads own the streams they read and close them at EOF: closing a buffered
    # stream from another thread would wait for the read in progress.
    @staticmethod
    def _pump(proc: Process, lines: queue.Queue[bytes]) -> None:
        try:
            for line in iter(proc.stdout.readline, b""):
                lines.put(line)
        except OSError:
            pass
        finally:
            lines.put(b"")
            proc.stdout.close()

    @staticmethod
    def _drain(stderr, tail: Tail) -> None:
        try:
            for line in iter(stderr.readline, b""):
                tail.write(line)
        except OSError:
            pass
        finally:
            stderr.close()

    def _stop(self, kill: bool = False) -> None:
        """End the agent: EOF on its stdin (it exits after its verb), or kill it; then reap it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if kill:
                proc.kill()
            proc.stdin.close()
            proc.wait(timeout=CLOSE_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            try:
                proc.wait(timeout=CLOSE_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        with self._lock:
            self._stop()


@atexit.register
def close_all() -> None:
    """Every link still open: a command's agents end with the command."""
    for link in list(_open):
        link.close()
