"""The sweep's trial worker: runs on the client host, under the device's CPU limit.

One long-lived process per sweep (starting Python under a 5% CPU quota costs seconds), fed one trial
per line of JSON on stdin and answering one line of JSON per trial on stdout (`contracts.worker_api`:
a `TrialSpec` in, a `TrialResult` out). Inputs are random matrices from the sweep's seed, the same
for every method and repetition of an (op, size), made once and outside the timed region.

In scaled mode with the devices' targets, each successful trial's work (the local kernel, or the
method's encode of the request and decode of the response, and with a server device the server's
stages it reported) is a reference run once it is scaled: its CPU time is the host's speed now,
which the device's slowdowns follow (`client.scaler`). The
trial's own runs, not the same work run again beside it: a second run right after the first found
the caches warm and came out faster than a trial's run (measured, the 400x400 product on the 2-core
VM: 3.25 ms right after itself against 4.2 ms after other work), so a trial's CPU time over such
runs put the device's local time up to 30% above its target, by as much as the work before the
trial had cooled the caches (issue 25's check: 0.65-0.73 s for a 0.713 s target).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

import numpy as np

from client.calibration_work import image_works, trial_operands
from client.device_cores import DeviceCores, Pacer
from client.fetch import fetch_dataset
from client.grpc_offload import GrpcOffloadClient
from client.host_references import HostReferences
from client.offload import CPU_LOCK, OffloadClient, OffloadError, StageTimes, local_times
from client.rpc_calls import client_for, request_values, run_batch, study_method
from client.scaler import CLIENT, Scaler
from client.throttle import Aligner
from contracts.codecs import get_codec
from contracts.cpu_lock import references_path
from contracts.datasets import FETCH
from contracts.device import key as dkey
from contracts.errors import UserError
from contracts.images import file_pixels, is_image_op, load
from contracts.operands import IntRange, parse_int_range
from contracts.ops import execute
from contracts.rpc_study import is_study_op
from contracts.short_work import NOTHING, Expected, cpu_clock, per_run_cpu_s
from contracts.stages import (
    CODEC_TEXTS,
    COMPACT,
    CONNECTIONS,
    GRPC,
    LOCAL,
    PER_TRIAL,
    PERSISTENT,
    PYTHON,
    TAGLESS,
    method_codec,
)
from contracts.wire import body_bytes
from contracts.worker_api import TrialResult, TrialSpec


class TrialWorker:
    def __init__(
        self,
        url: str,
        seed: int,
        timeout: float,
        scaler: Scaler | None = None,
        grpc_target: str | dict[str, str] | None = None,
        quotas: dict[str, float] | None = None,
        connection: str = PER_TRIAL,
        pacer: Pacer | None = None,
        codec_text: str = COMPACT,
        int_range: IntRange | None = None,
        tagless_targets: dict[str, str] | None = None,
    ) -> None:
        """`grpc_target`: the Python gRPC server's HOST:PORT, or each gRPC server's by language;
        `pacer`: its HTTP requests' client stages last the device's time on the cores it shares with
        the client's other workers (concurrency: `client.device_cores`); `codec_text`: the JSON
        codecs' text (CODEC_TEXTS), reported in every result; `int_range`: the integer operands'
        (`contracts.operands`; None: the ops' own ranges). Both are the experiment's (issue 45).
        `tagless_targets`: each tagless server's HOST:PORT by language (an RPC study's)."""
        # under a CPU quota (throttle), each timed stage starts at a known point of the quota's period,
        # with the quota of its kind of work when the calibration gave per-work `quotas`
        self.align = Aligner(quotas=quotas)
        persistent = connection == PERSISTENT
        self.connection = connection
        self.url, self.timeout, self.persistent = url, timeout, persistent
        self.pacer = pacer
        self.codec_text, self.int_range = codec_text, int_range
        # scaled: a stage's CPU time over repeated runs of its work (`contracts.short_work`), the
        # client's own, and the server's when a scaled server device follows its stages
        self.retimes = {
            "retime": scaler is not None,
            "server_retime": scaler is not None and scaler.server_scale is not None,
        }
        self.client = OffloadClient(
            url,
            timeout=timeout,
            align=self.align,
            persistent=persistent,
            pacer=pacer,
            codec_text=codec_text,
            **self.retimes,
        )
        self.clients = {(1, None): self.client}  # by transfer settings (parallelism, io_kb)
        targets = (
            grpc_target if isinstance(grpc_target, dict) else {PYTHON: grpc_target} if grpc_target else {}
        )
        self.grpc = {  # one client per gRPC server, each with its own channel
            server: GrpcOffloadClient(
                target, timeout=timeout, align=self.align, persistent=persistent, **self.retimes
            )
            for server, target in targets.items()
        }
        # an RPC study's calls (`rpc`): each transport's and server's target, and with a persistent
        # connection its client, kept across trials
        self.study_targets = {TAGLESS: dict(tagless_targets or {}), GRPC: targets}
        self.study_clients: dict[tuple[str, str], object] = {}
        self.seed = seed
        self.image: str | None = None  # an image file the image ops run on (`--image`)
        self.scaler = scaler  # scaled device emulation; None: the wall clock is the measurement
        self._operands: dict[tuple, list[np.ndarray]] = {}
        self._met: set[tuple] = set()  # the (op, size, dtype, method) this worker has run (`meet`)
        self.references = HostReferences(references_path(CPU_LOCK.path))

    def operands(self, op: str, size: int, dtype: str) -> list[np.ndarray]:
        key = (op, size, dtype)
        if key not in self._operands and self.image and is_image_op(op) and size == file_pixels(self.image):
            self._operands[key] = [load(self.image)]  # the experiment's image file, at its own size
        if key not in self._operands:
            self._operands[key] = trial_operands(op, size, dtype, self.seed, self.int_range)
        return self._operands[key]

    def meet(self, op: str, operands: list[np.ndarray], method: str, size: int | None = None) -> None:
        """Scaled mode: the first time this worker meets a trial's work (its kernel at this size, or its
        method's encode and decode of this size), that work once, untimed, before the trial's timed
        stages. A process's first run of new work pays first-touch page faults and cold caches that
        no later run does (measured, the smoke run of 2026-11-27: the first local trial of mul 500
        16% and of mul 700 24% above paper-p4's time, each later one within a few percent), and the
        warm-up trials (`warmup`) run at the smallest size only.

        Then, where a slowdown follows this host, the work is timed once as a trial times it and that
        figure takes the calibration's place in the slowdown's window (`Scaler.seed`): the same work
        runs at another speed in this long-lived process than in the calibration's (measured, the
        4-testbed check of 2026-11-27: the protobuf encode of a mul 1200 request 89-106 ms of CPU in
        the trials against 68.6 ms in the calibration, whose process had encoded JSON's 55 MB texts
        before it; 90.6 ms in a calibration of gRPC alone, 97-105 in a plain process)."""
        key = (op, operands[0].shape, operands[0].dtype.name, method)
        if self.scaler is None or key in self._met:
            return
        self._met.add(key)
        size = operands[0].shape[0] if size is None else size
        # no other worker's timed stage beside it, nothing else on its core (`contracts.cpu_lock`)
        with CPU_LOCK.held(unpreempted=self.pacer is None):
            result = execute(op, operands)
            if method == LOCAL:
                works = [("kernel", lambda: execute(op, operands))]
            elif is_image_op(op):  # the image's encode and decode, as the calibration times them
                works = [(kind, work) for kind, _, work, _ in image_works(op, size, operands, [method])[1:]]
                for _, work in works:
                    work()
            else:
                codec = get_codec(method_codec(method), self.codec_text)
                if method == GRPC:
                    encode = lambda: codec.encode_op_request(op, operands)  # noqa: E731
                else:
                    encode = lambda: codec.encode_request(operands)  # noqa: E731
                encode()
                body, headers = codec.encode_response(result)
                reply = body_bytes(body)
                decode = lambda: codec.decode_response(reply, headers)  # noqa: E731
                decode()
                works = [("encode", encode), ("decode", decode)]
            if self.scaler.follows:
                for kind, work in works:
                    k = dkey(kind, op, size, None if method == LOCAL else method)
                    clock = cpu_clock(kind)
                    begun = clock()
                    work()
                    expected = self.scaler.reference_s(CLIENT, k)
                    self.scaler.seed(CLIENT, k, per_run_cpu_s(work, clock() - begun, clock, expected))

    def follow(self, out: dict, op: str, size: int, method: str, server: str = PYTHON) -> None:
        """The scaled trial's work as this host's reference runs (the slowdowns the trial was scaled
        with did not include them): the client's stages and, with a server device, the server's, with
        every other worker's on this host since the last trial (`client.host_references`). Not a
        warm-up's (trial -1): it is untimed because a fresh process's first runs are not a trial's
        (measured in issue 25's check: with four testbeds' warm-ups at the smallest size among 9
        trials, mul 400 JSON's encode came out 27% low)."""
        if not (self.scaler and self.scaler.follows) or (out.get("trial") or 0) < 0:
            return
        mine = self.scaler.runs(out, op, size, method, server)
        if not mine and self.references.path is None:
            return
        with CPU_LOCK.held():  # every worker on this host follows every worker's runs
            runs = self.references.exchange(mine)
        for run in runs:
            self.scaler.refer(*run)

    def pace(self, op: str, size: int, method: str) -> bool:
        """Set the pacer's device times for this trial's stages (the scaler's slowdowns now); whether
        the client's stages are paced (they then come back as the device's times)."""
        if self.pacer is None or self.scaler is None or self.scaler.scale is None or method == GRPC:
            return False
        factor = self.scaler.factor
        self.pacer.device_s = lambda kind, cpu_s: cpu_s * factor(kind, op, size, method)
        return True

    def http(self, parallelism: int | None, io_kb: int | None) -> OffloadClient:
        """The HTTP client of these transfer settings (one each, so a persistent one keeps its connections)."""
        key = (parallelism or 1, io_kb)
        if key not in self.clients:
            self.clients[key] = OffloadClient(
                self.url,
                timeout=self.timeout,
                align=self.align,
                persistent=self.persistent,
                parallelism=key[0],
                io_bytes=io_kb * 1024 if io_kb else None,
                pacer=self.pacer,
                **self.retimes,
                codec_text=self.codec_text,
            )
        return self.clients[key]

    def remote(
        self,
        op: str,
        operands: list[np.ndarray],
        method: str,
        server: str = PYTHON,
        parallelism: int | None = None,
        io_kb: int | None = None,
        expected: Expected = NOTHING,
    ) -> tuple[np.ndarray, StageTimes]:
        """Offload over gRPC to `server`'s gRPC server for method `grpc`, else over HTTP with the
        method's codec and the transfer settings; `expected`: what the stages' work is expected to
        take on this host (`contracts.short_work`)."""
        if method != GRPC:
            return self.http(parallelism, io_kb).offload(op, operands, method, expected)
        if server not in self.grpc:
            raise UserError(f"no {server} gRPC server to offload to", "give the worker --grpc-targets")
        return self.grpc[server].offload(op, operands, expected)

    def fetch(self, spec: TrialSpec, out: dict) -> TrialResult:
        """A dataset fetch (`client.fetch`): its seconds are its completion and its communication."""
        out.update(started_at=datetime.now(UTC).isoformat(timespec="milliseconds"), connection=PER_TRIAL)
        got = fetch_dataset(
            self.url, spec.dataset, self.seed, spec.concurrency, spec.parallelism, spec.io_kb, self.timeout
        )
        t = got.seconds
        out.update(
            ok=True, t_total=t, t_request=t, t_comm=t, bytes_up=got.bytes_up, bytes_down=got.bytes_down
        )
        return TrialResult(**out)

    def rpc(self, spec: TrialSpec, out: dict) -> TrialResult:
        """An RPC study's trial (`client.rpc_calls`): a batch of `calls` calls of the operation at its
        size over the transport (the method) to the server, after one untimed call; a warm-up (trial
        -1) makes at most 50. Per-trial connections: the batch's own connection, opened by that first
        call; persistent: one per transport and server, kept. At host speed: no device emulation."""
        server = spec.server or PYTHON
        targets = self.study_targets.get(spec.method, {})
        if server not in targets:
            raise UserError(
                f"no {server} {spec.method} server to call", f"give the worker --{spec.method}-targets"
            )
        method = study_method(spec.op, spec.size)
        values = request_values(method, spec.size, self.seed)
        calls = spec.calls or 1
        calls = min(calls, 50) if spec.trial < 0 else calls
        key = (spec.method, server)
        client = self.study_clients.get(key) or client_for(spec.method, targets[server], persistent=True)
        out.update(
            started_at=datetime.now(UTC).isoformat(timespec="milliseconds"), connection=self.connection
        )
        try:
            batch = run_batch(client, method, values, calls, warmup=1)
        except BaseException:  # its connection may be broken: the next batch opens its own
            self.study_clients.pop(key, None)
            client.close()
            raise
        if self.persistent:
            self.study_clients[key] = client
        else:
            client.close()
        out.update(
            ok=True,
            t_total=batch.total_s,
            calls=batch.calls,
            t_call_median=batch.median_s,
            t_call_p99=batch.p99_s,
            cpu_server_call=batch.server_cpu_s,
            bytes_up=batch.bytes_up,
            bytes_down=batch.bytes_down,
        )
        return TrialResult(**out)

    def run(self, spec: TrialSpec) -> TrialResult:
        # the record as it grows (the scaler rewrites its times), with the text its JSON codecs write
        out: dict = {"trial": spec.trial, "codec_text": self.codec_text}
        try:
            if spec.op == FETCH:
                return self.fetch(spec, out)
            if is_study_op(spec.op):
                return self.rpc(spec, out)
            op, size, method = spec.op, spec.size, spec.method
            operands = self.operands(op, size, spec.dtype)
            self.meet(op, operands, method, size)
            out["started_at"] = datetime.now(UTC).isoformat(timespec="milliseconds")
            self.align.trial(op, size, method)
            if method == LOCAL:
                expected = self.scaler.expected(op, size, LOCAL) if self.scaler else NOTHING
                _, wall, cpu = local_times(op, operands, self.align, self.retimes["retime"], expected)
                out.update(ok=True, t_total=wall, cpu_total=cpu)
                if self.scaler:
                    self.scaler.local(out, op, size)
                self.follow(out, op, size, LOCAL)
            else:
                out["connection"] = self.connection
                paced = self.pace(op, size, method)
                server = spec.server or PYTHON
                expected = self.scaler.expected(op, size, method, server) if self.scaler else NOTHING
                _, stages = self.remote(op, operands, method, server, spec.parallelism, spec.io_kb, expected)
                out.update(ok=True, **stages.as_dict())
                if self.scaler:
                    self.scaler.remote(out, op, size, method, paced=paced)
                self.follow(out, op, size, method, server)
        except OffloadError as exc:
            out.update(ok=False, error=f"server answered {exc.status}: {exc.error}: {exc.detail}"[:500])
        except Exception as exc:  # a failed trial is data, not the end of the sweep
            out.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
        return TrialResult(**out)  # a key it lacks is a bug: raised, with its traceback


def parser() -> argparse.ArgumentParser:
    """The worker's flags: what the sweep's link gives it (`testbed.sweep.worker_link`)."""
    parser = argparse.ArgumentParser(prog="python -m client.worker", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--grpc-target", help="HOST:PORT of the Python gRPC server (method grpc)")
    parser.add_argument(
        "--grpc-targets",
        help='each gRPC server by language, as JSON: {"python": "HOST:PORT", "cpp": ...} (method grpc)',
    )
    parser.add_argument(
        "--tagless-targets", help='each tagless server by language, as JSON: {"python": "HOST:PORT", ...}'
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--codec-text", choices=CODEC_TEXTS, default=COMPACT, help="the JSON codecs' text (era: issue 45)"
    )
    parser.add_argument(
        "--int-range", help="the integer operands' LOW,HIGH (numpy.random.randint's; default: each op's)"
    )
    parser.add_argument("--image", help="an image file the image ops run on, at its pixel count")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--connection",
        choices=CONNECTIONS,
        default=PER_TRIAL,
        help="a new TCP connection per trial, or one kept",
    )
    emulation = parser.add_mutually_exclusive_group()
    emulation.add_argument(
        "--scale",
        help="scaled device emulation: the slowdowns of `client.scaled_calibration.calibrate`, as JSON",
    )
    emulation.add_argument(
        "--quotas", help="throttled device emulation: the fraction of a core per kind of work, as JSON"
    )
    parser.add_argument(
        "--targets",
        help="scaled: the client device's seconds per kind of work, as JSON; the slowdowns then follow "
        "this host's speed through the trials' own CPU times",
    )
    parser.add_argument(
        "--device-cores",
        nargs=2,
        metavar=("PATH", "N"),
        help="concurrency: the client device's N cores as a timeline in PATH, shared by the client's "
        "workers; each client stage then lasts the device's time (scaled mode)",
    )
    parser.add_argument(
        "--server-scale",
        help="a server device (scaled): the server host's slowdowns per kind of work, as JSON",
    )
    parser.add_argument(
        "--server-targets",
        help="a server device: its seconds per kind of work, as JSON; its slowdowns then follow the "
        "server host's speed through the CPU times the server reports for each trial",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    scale = json.loads(args.scale) if args.scale else None
    server_scale = json.loads(args.server_scale) if args.server_scale else None
    targets = json.loads(args.targets) if args.targets else None
    server_targets = json.loads(args.server_targets) if args.server_targets else None
    scaler = Scaler(scale, server_scale, targets, server_targets) if scale or server_scale else None
    quotas = json.loads(args.quotas) if args.quotas else None
    targets = json.loads(args.grpc_targets) if args.grpc_targets else args.grpc_target
    pacer = Pacer(DeviceCores(args.device_cores[0], int(args.device_cores[1]))) if args.device_cores else None
    int_range = parse_int_range(args.int_range, "--int-range") if args.int_range else None
    worker = TrialWorker(
        args.url,
        args.seed,
        args.timeout,
        scaler,
        targets,
        quotas,
        args.connection,
        pacer,
        codec_text=args.codec_text,
        int_range=int_range,
        tagless_targets=json.loads(args.tagless_targets) if args.tagless_targets else None,
    )
    worker.image = args.image
    if quotas:
        try:  # fails here, before any trial, if the cgroup is not writable
            worker.align.put(quotas["base"])
        except (OSError, UserError) as exc:
            print(
                f"worker: error: cannot set the client's CPU quota: {exc} (fix: run the client as root)",
                file=sys.stderr,
            )
            return 2
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip():
            # a spec with a key TrialSpec lacks is a bug (the two ends are one version): raised
            print(json.dumps(worker.run(TrialSpec.from_json(json.loads(line))).to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
