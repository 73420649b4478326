"""A fake host for testing the orchestration without root: it records every agent call and command
and answers from a script, through the same JSON protocol and `Host` code paths as a real host; its
`popen` starts a scripted trial worker (`FakeWorker`) that speaks `client.worker`'s protocol.

As the agent does, it decodes each request into its verb's type (`contracts.agent_api`; a key the
type lacks is answered as a bug) and encodes the script's answer, which `Host.agent` decodes into
the verb's answer type: a script answers what the agent would, complete (`tests.fake_answers`
builds the usual ones).

It is strict, like invoke's `MockContext`: an agent verb, a command or a process nobody scripted
raises `Unscripted`, and is kept (in the fake's `unscripted` and in `UNSCRIPTED`), so code that
swallows the exception still fails its test: `tests/unit/conftest.py` checks after each one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from contracts.agent_api import VERB_TYPES
from contracts.command import Result
from contracts.errors import UserError
from contracts.message import decode, encode
from contracts.units import expected_goodput
from testbed.backends.host import Host
from testbed.experiment import Experiment, Validation
from testbed.inventory import HostSpec

AgentReply = Any | Callable[..., Any]  # a value, or a function of the verb's arguments (may raise)
CommandReply = Callable[[list[str]], tuple[int, str]]
WorkerScript = Callable[[dict], dict | str]  # a trial spec -> the worker's answer (a record, or a raw line)


class Unscripted(Exception):
    """The code asked a fake host for something no test scripted: an agent verb, a command, a process.

    Not a `UserError`: it is the test's gap or the code's surprise, never the user's problem, so the
    CLI's handler and the code's `except UserError` cannot turn it into one line and carry on."""

    def __init__(self, host: str, what: str, asked: str, scripted: list[str]) -> None:
        self.host, self.what, self.asked, self.scripted = host, what, asked, scripted
        known = ", ".join(scripted) if scripted else "nothing"
        super().__init__(f"fake host {host}: {what} {asked} was not scripted (scripted: {known})")


UNSCRIPTED: list[Unscripted] = []  # everything any fake raised, for the check after each test


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
        self.calls: list[tuple] = []  # ("agent", verb, args), ("run", argv), ("popen", argv), in order
        self.replies: dict[str, AgentReply] = {}
        self.commands: list[tuple[tuple[str, ...], CommandReply]] = []
        self.files: dict[str, bytes] = {}
        self.workers: list[FakeWorker] = []  # every process `popen` started, in order
        self.unscripted: list[Unscripted] = []  # what was asked that nobody scripted (each one raised)
        self._worker: tuple[WorkerScript, int] | None = None

    # ---------------------------------------------------------------- scripting
    def reply(self, verb: str, value: AgentReply) -> FakeHost:
        """The agent verb `verb` answers `value` (or `value(**args)`, the arguments sent, as the
        request's typed fields: tuples, a LinkSpec; a UserError it raises is the agent's refusal). A
        verb nobody scripted raises `Unscripted`."""
        self.replies[verb] = value
        return self

    def on(self, *prefix: str, answer: CommandReply | tuple[int, str] = (0, "")) -> FakeHost:
        """Commands starting with `prefix` get `answer` (exit status, stdout), by default success with
        no output; the latest matching prefix wins. A command no prefix matches raises `Unscripted`."""
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

    def _unscripted(self, what: str, asked: str, scripted: list[str]) -> Unscripted:
        exc = Unscripted(self.name, what, asked, scripted)
        self.unscripted.append(exc)
        UNSCRIPTED.append(exc)
        return exc

    def _agent_exec(self, verb: str, payload: str, timeout: float) -> Result:
        args = json.loads(payload)
        self.calls.append(("agent", verb, args))
        try:
            request = decode(VERB_TYPES[verb][0], args)
        except (KeyError, TypeError):  # as the agent answers a request that is not its verb's type
            return self._answer(verb, {"ok": False, "verb": verb, "bug": traceback.format_exc()}, 1)
        if verb not in self.replies:
            raise self._unscripted(
                "agent verb", f"{verb} {json.dumps(args, sort_keys=True)}", sorted(self.replies)
            )
        reply = self.replies[verb]
        try:
            result = reply(**{key: getattr(request, key) for key in args}) if callable(reply) else reply
            return self._answer(verb, {"ok": True, "result": encode(result)}, 0)
        except UserError as exc:
            return self._answer(verb, {"ok": False, "error": exc.message, "fix": exc.fix}, 2)

    def _answer(self, verb: str, answer: dict, status: int) -> Result:
        return Result(self.name, self.python("agent", verb), status, json.dumps(answer) + "\n", "")

    def _exec(self, argv, *, timeout, env, input) -> Result:
        self.calls.append(("run", list(argv)))
        self.last_input = input  # what the command read on stdin, for answers that depend on it
        for prefix, answer in self.commands:
            if tuple(argv[: len(prefix)]) == prefix:
                status, out = answer(list(argv))
                return Result(self.name, list(argv), status, out, "" if status == 0 else out)
        scripted = list(dict.fromkeys(" ".join(prefix) for prefix, _ in self.commands))
        raise self._unscripted("command", json.dumps(list(argv)), scripted)

    def _popen(self, argv, env, **kwargs) -> FakeWorker:
        self.calls.append(("popen", list(argv)))
        if self._worker is None:
            raise self._unscripted("process", json.dumps(list(argv)), [])
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


# ------------------------------------------------------------------ scripts for the hosts of a testbed
HEALTH = ("python", "-m", "client", "health")
IPERF = ("python", "-m", "client.iperf")
CAPTURED = Path(__file__).resolve().parent / "data" / "captured"


def shell(host: FakeHost, python_version: str = "Python 3.11.2") -> FakeHost:
    """The commands the SSH backend runs on a host, answered as a root shell there would, over the
    fake's files: `id -u`, `python --version`, `mkdir -p`, `rm -rf`, `rmdir`, `test -d` and the code's
    extraction (which makes its directory). Scripting a prefix again overrides one of them."""
    dirs: set[str] = set()

    def under(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip("/") + "/")

    def mkdir(argv: list[str]) -> tuple[int, str]:
        dirs.update(argv[2:])
        return 0, ""

    def rm(argv: list[str]) -> tuple[int, str]:
        for root in argv[2:]:
            dirs.difference_update([d for d in dirs if under(d, root)])
            for path in [p for p in host.files if under(p, root)]:
                del host.files[path]
        return 0, ""

    def extract(argv: list[str]) -> tuple[int, str]:
        dirs.add(argv[-1])
        return 0, ""

    python = host.spec.python
    host.on("id", "-u", answer=(0, "0\n")).on(python, "--version", answer=(0, python_version + "\n"))
    host.on("mkdir", "-p", answer=mkdir).on("rm", "-rf", answer=rm).on("rmdir", "--ignore-fail-on-non-empty")
    host.on("test", "-d", answer=lambda argv: (0 if argv[2] in dirs else 1, ""))
    return host.on(python, "-m", "tarfile", "-e", answer=extract)


def healthy(host: FakeHost) -> FakeHost:
    """The client's `python -m client health` finds the offload server."""
    return host.on(*HEALTH, answer=(0, json.dumps({"status": "ok"})))


def cgroups(host: FakeHost, quota: dict[str, float] | None = None) -> dict[str, float]:
    """The client's agent keeps CPU limits as the real one does: `cpu.apply` makes one, `cpu.read`
    reads it ({} where there is none), `cpu.remove` says whether there was one. Returns the limits."""
    limits: dict[str, float] = dict(quota or {})

    def read(name: str) -> dict:
        if name not in limits:
            return {}
        period = 100_000
        quota_us = round(limits[name] * period)
        return {
            "cgroup": f"/sys/fs/cgroup/{name}",
            "quota_us": quota_us,
            "period_us": period,
            "fraction": limits[name],
        }

    def apply(name: str, quota: float) -> dict:
        limits[name] = quota
        return read(name)

    host.reply("cpu.apply", apply).reply("cpu.read", read)
    host.reply("cpu.remove", lambda name: limits.pop(name, None) is not None)
    return limits


def services(host: FakeHost, first_pid: int = 4242) -> dict[str, int]:
    """The host's agent keeps services as the real one does: `service.start` gives a pid,
    `service.status` the pid of one running (None otherwise), `service.stop` whether one ran."""
    running: dict[str, int] = {}
    pids = iter(range(first_pid, first_pid + 10_000))

    def start(dir: str, name: str, argv: list[str], env: dict | None = None) -> int:
        running[name] = next(pids)
        return running[name]

    host.reply("service.start", start)
    host.reply("service.status", lambda dir, name: running.get(name))
    host.reply("service.stop", lambda dir, name: running.pop(name, None) is not None)
    return running


def offloads_off(host: FakeHost, *ifnames: str) -> FakeHost:
    """`ethtool -K IF tx off` succeeds on these interfaces (the embedded testbed's veths)."""
    for ifname in ifnames:
        host.on("ethtool", "-K", ifname, "tx", "off")
    return host


def link(lab, efficiency: Callable[[float, int], float] = lambda rate_mbps, run: 0.99) -> None:
    """The client's iperf3 measures what the appliance was last shaped to: the link's TCP goodput times
    `efficiency(rate in Mbit/s, how many iperf3 runs at that rate so far, this one included)`."""
    appliance = lab.hosts["appliance"]
    runs = Counter()

    def iperf(argv: list[str]) -> tuple[int, str]:
        reverse = "--reverse" in argv
        rate = appliance.args("shape.apply")[-1]["link"]["down_rate" if reverse else "up_rate"]
        runs[rate] += 1
        data = json.loads((CAPTURED / f"iperf3-{'down' if reverse else 'up'}-100mbit.json").read_text())
        goodput = expected_goodput(rate, lab.inv.link.mtu) * efficiency(rate / 1e6, runs[rate])
        data["end"]["sum_received"]["bits_per_second"] = goodput
        return 0, json.dumps(data)

    lab.hosts["client"].on(*IPERF, answer=iperf)


def healthy_worker(spec: dict) -> dict:
    """What a healthy trial worker reports (the time says which trial it was)."""
    return {"trial": spec["trial"], "ok": True, "t_total": spec["size"] / 1000, "started_at": "now"}


FAKE_SWEEP = Experiment(  # the fake sweeps' experiment: 4 local trials, then 8 per rate
    name="fake",
    ops=("mul",),
    sizes=(100, 200),
    rates_mbps=(10.0, 40.0),
    methods=("json", "raw"),
    reps=2,
    seed=3,
    validation=Validation(duration=1, retries=1),
    trial_timeout=5.0,
)


def server_calibration(host: FakeHost, device: str) -> list[dict]:
    """`host` answers `python -m client.calibration` for the server's role: every work's slowdown 7, the
    kernel at size 200 flagged (30% over: the server cannot reach mul 200). Returns the requests, as
    they come."""
    return calibration_answers(host, device, "server", 7.0, flagged_size=200)


def calibration_answers(
    host: FakeHost,
    device: str,
    role: str,
    slowdown: float,
    flagged_size: int | None = None,
    flagged_kind: str = "kernel",
    steadiness: dict | None = None,
) -> list[dict]:
    """`host` answers `python -m client.calibration` for `role`: every work's slowdown `slowdown`, the
    `flagged_kind` of work (every codec's, for encode or decode) at `flagged_size` flagged (30% over),
    and `steadiness` (`contracts.steadiness.Steadiness` as JSON) if given. Returns the requests, as
    they come."""
    from contracts.device import Grid, key

    requests: list[dict] = []

    def answer(argv):
        request = json.loads(host.last_input)
        requests.append(request)
        grid = Grid.from_dict(request["grid"])
        rows, scale = [], {}
        for op in grid.ops:
            for size in grid.sizes:
                for kind, codec in [("kernel", None)] + [
                    (k, c) for c in grid.codecs for k in ("decode", "encode")
                ]:
                    k = key(kind, op, size, codec)
                    scale[k] = slowdown
                    flagged = (kind, size) == (flagged_kind, flagged_size)
                    rows.append({"key": k, "work": kind if codec is None else f"{codec} {kind}", "op": op,
                                 "size": size, "target_s": 1.0, "achieved_s": 1.3 if flagged else 1.0,
                                 "error_pct": 30.0 if flagged else 0.0, "flagged": flagged})  # fmt: skip
        calibration = {"device": device, "mode": "scaled", "role": role, "rows": rows, "scale": scale}
        if steadiness is not None:
            calibration["steadiness"] = steadiness
        return 0, json.dumps({**calibration, "tolerance_pct": 10.0})

    host.on("python", "-m", "client.calibration", answer=answer)
    return requests
