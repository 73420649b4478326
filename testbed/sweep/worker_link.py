"""The sweep's link to the trial worker on the client host: one process per sweep, a trial per line.

The worker itself (`python -m client.worker`, class `TrialWorker`) runs on the client under its CPU
limit; this is the orchestrator's end of its stdin and stdout, where a `contracts.worker_api.TrialSpec`
goes and a `TrialResult` comes back.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path

from contracts.worker_api import TrialResult, TrialSpec, WorkerEmulation
from testbed.backends.lab import Lab
from testbed.experiment import Experiment
from testbed.sweep.plan import Trial


class WorkerDied(Exception):
    pass


class WorkerLink:
    """The client host's trial worker process (`client.worker`), spoken to in JSON lines.

    A reader thread turns its stdout into a queue, so a trial can time out whatever carries the
    pipe (a local process or an SSH channel).
    """

    def __init__(
        self,
        lab: Lab,
        exp: Experiment,
        stderr_path: Path,
        calibration: WorkerEmulation | None = None,
        role: str = "client",
    ) -> None:
        """`calibration`: the devices' emulation (`testbed.sweep.calibration.calibrate_devices`), None
        without; the worker takes its slowdowns (scaled) or its per-work quotas (throttle). `role`: the
        client host it runs on (several clients: `client2` ...)."""
        host = lab.host(role)
        self.calibration, self.role = calibration, role
        if calibration is not None and calibration.quotas:
            # a whole core for the worker's start (its imports would take minutes under the device's
            # quota, and a worker that died left its last stage's quota); it then puts its own in force
            lab.set_client_quota(1.0)
        emulation = emulation_args(calibration)
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "ab")  # noqa: SIM115 - lives as long as the worker
        self.timeout = exp.trial_timeout
        self.exp = exp  # an RPC study's batch: its calls at the trial's rate
        self.proc = host.popen(
            host.python(
                "client.worker",
                "--url",
                lab.server_url,
                "--grpc-targets",
                json.dumps(lab.grpc_targets),
                *(["--tagless-targets", json.dumps(lab.tagless_targets)] if exp.rpc_study else []),
                "--seed",
                str(exp.seed),
                "--timeout",
                str(exp.trial_timeout),
                "--connection",
                exp.connection,
                "--codec-text",
                exp.codec_text,
                *(["--int-range", ",".join(map(str, exp.int_range))] if exp.int_range else []),
                *(["--image", exp.image] if exp.image else []),
                *emulation,
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            limited=False if exp.rpc_study else None,  # an RPC study's calls run at host speed
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        # importing numpy under a small CPU quota takes a while
        self._read(timeout=max(120.0, self.timeout))

    def _pump(self) -> None:
        for line in iter(self.proc.stdout.readline, b""):
            self._lines.put(line)
        self._lines.put(b"")

    def _read(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer from the client worker within {timeout:g} s") from None
        if not line:
            raise WorkerDied(f"the client worker exited (status {self.proc.poll()})")
        return json.loads(line)

    def run(self, trial: Trial) -> TrialResult:
        """One trial's result; a result that is not a `TrialResult` is a bug (TypeError)."""
        spec = TrialSpec(
            trial=trial.trial,
            op=trial.op,
            size=trial.size,
            dtype=trial.dtype,
            method=trial.method,
            server=trial.server,
            parallelism=trial.parallelism,
            io_kb=trial.io_kb,
            concurrency=trial.concurrency if trial.dataset else None,
            dataset=trial.dataset,
            calls=self.exp.calls_of(trial.rate_mbps),
        )
        try:
            self.proc.stdin.write((json.dumps(spec.to_json()) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDied("the client worker exited") from exc
        return TrialResult.from_json(self._read(self.timeout + 30))

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:  # the reader thread has seen EOF once the process is gone
            self.proc.stdout.close()
        self._stderr.close()


def emulation_args(calibration: WorkerEmulation | None) -> list[str]:
    """The worker's flags for the devices' emulation: the client's slowdowns (scaled) with the device's
    targets they follow this host by (`client.scaler`), or its quotas (throttle); the server's
    slowdowns with its device's targets; with concurrency the device's cores its client's workers share."""
    calibration = calibration or WorkerEmulation()
    args = [
        arg
        for flag in ("scale", "quotas", "server_scale")
        if getattr(calibration, flag)
        for arg in (f"--{flag.replace('_', '-')}", json.dumps(getattr(calibration, flag)))
    ]
    if calibration.scale and calibration.cores:  # concurrency: the device's cores its client's workers share
        path, cores = calibration.cores
        args += ["--device-cores", str(path), str(cores)]
    for scale, rows, flag in (
        (calibration.scale, calibration.rows, "--targets"),
        (calibration.server_scale, calibration.server_rows, "--server-targets"),
    ):
        if scale and rows:
            args += [flag, json.dumps({row.key: row.target_s for row in rows})]
    return args
