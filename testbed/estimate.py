"""How long a sweep will take, before it starts: a per-trial model from the device profile, the bytes
each method puts on the wire and the rates.

One trial of a cell costs, in the model:
- local: the device's compute time for the op and size (`DeviceProfile.compute_s`);
- remote: the device's encode of the operands and decode of the result (`DeviceProfile.marshal_s`),
  both bodies through the link at its TCP goodput (`contracts.units.expected_goodput`), and the
  server's decode, compute and encode at this machine's speed (the embedded server is this machine);
- plus a fixed per-trial overhead (the worker's round trip, HTTP, the connection), and on the cgi
  server stack, for every HTTP trial, a fresh interpreter's start-up with what a CGI request imports
  (timed once on this machine, which is the embedded server).
That is what a trial measures (`DurationModel.trial_s`). How long it takes (`DurationModel.wall_s`, what the duration
and the ETA add up) differs in `scaled` mode: the client works at this machine's speed there and the
device's time is computed from CPU time, so its stages cost this machine's time (timed on samples).
Bytes on the wire are each codec's body size per byte of matrix data, measured once by encoding a
small sample with the codec itself. Without a device profile the client is this machine slowed by
its CPU quota. The sweep's set-up adds iperf3 validation per rate and the warm-up trials.

The device's calibration at the start of a session is not in the estimate. The progress line's ETA is
the same model scaled by what the trials so far took against what the
model said they would (`Progress`), so it corrects itself as trials complete.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from contracts.datasets import FETCH, FETCH_METHOD, lookup
from contracts.device import DeviceProfile, Mode, operand_bytes, result_bytes, work
from contracts.grid import is_unshaped
from contracts.rpc_study import LARGE_DATA, SAY_HELLO, expected_bytes, is_study_op
from contracts.stages import GRPC, LOCAL, TAGLESS, Stack, method_codec, offloads
from contracts.units import expected_goodput
from testbed.experiment import Experiment

MB = 1e6
TRIAL_OVERHEAD_S = 0.02  # worker round trip, HTTP request and response, connection set-up
HTTP_HEADERS = 400  # bytes of request or response headers around a body
FETCH_FILE_S = 0.01  # a fetch's request per file, beyond its bytes (its round trip, the server's work)
# an RPC study's call at host speed, for the estimate (docs/measurements.md, "Small messages": 1000
# SayHello calls took 0.14 s over tagless and 0.51 s over gRPC on the Python servers); and per int32
# value marshalled both ways, a guess of the right order (protobuf's Python messages are the slower)
CALL_S = {TAGLESS: 0.13e-3, GRPC: 0.49e-3}
VALUE_S = {TAGLESS: 0.04e-6, GRPC: 0.2e-6}
TCP_HEADERS = 66 * 2  # a call's segment and its ACK, each way
SAMPLE = 64  # matrix size of the sample the codecs and the kernels are timed on
KERNEL_SAMPLE = 256


@dataclass(frozen=True)
class HostSpeeds:
    """This machine's speed for the work the model does not take from the device profile."""

    gflops: float  # matrix multiplication
    codecs: dict[str, dict[str, float]]  # codec -> {"encode": MB/s, "decode": MB/s} of matrix data
    wire_ratio: dict[str, float]  # codec -> body bytes per byte of matrix data
    cgi_start_s: float = 0.0  # the cgi stack's per-request process start-up (0: not measured, wsgi)
    # (op, size, method) -> (request, response) body bytes where a cell's were counted whole (the
    # paper's model: an integer product's text grows with the size, and inv's and log's float64
    # results are written longer than their integer operands); a cell without takes `wire_ratio`
    bodies: dict[tuple[str, int, str], tuple[float, float]] = field(default_factory=dict)


def measure_host(
    methods,
    dtype: str = "float64",
    seed: int = 1,
    cgi: bool = False,
    int_range: tuple[int, int] | None = None,
    codec_text: str = "compact",
) -> HostSpeeds:
    """Time a multiplication and each codec on small samples (well under a second in all); with `cgi`,
    also a fresh interpreter importing what a CGI request imports (NumPy and the codecs). Integer
    samples are drawn from the experiment's `int_range` and written in its `codec_text`, which set
    the text's bytes per element (issue 45)."""
    from contracts.codecs import get_codec
    from contracts.marshal_speed import best_time, marshal_times  # as `testbed bench` measures them
    from contracts.operands import MUL_INTS
    from contracts.ops import execute

    rng = np.random.default_rng(seed)
    big = rng.random((KERNEL_SAMPLE, KERNEL_SAMPLE))
    gflops = 2 * KERNEL_SAMPLE**3 / best_time(lambda: big @ big, 3, 10, 0.2) / 1e9
    if dtype == "float64":
        operands = [rng.random((SAMPLE, SAMPLE)) for _ in range(2)]
    else:
        low, high = int_range or MUL_INTS  # the trials' (`client.offload.make_operands`)
        operands = [rng.integers(low, high, (SAMPLE, SAMPLE), dtype=dtype) for _ in range(2)]
    result = execute("mul", operands)
    data = 3 * operands[0].nbytes  # what the sample's request and response carry
    codecs, ratio = {}, {}
    for name in methods:
        if name in (LOCAL, FETCH_METHOD, TAGLESS):  # a fetch moves files, no codec's bodies; an
            # RPC study's calls are estimated per call (`rpc_trial_s`)
            continue
        codec = get_codec(method_codec(name), codec_text)  # grpc: protobuf
        t = marshal_times(codec, operands, result, (2, 5, 0.05))
        codecs[name] = {"encode": data / t["encode_s"] / MB, "decode": data / t["decode_s"] / MB}
        ratio[name] = (t["bytes_up"] + t["bytes_down"]) / data
    return HostSpeeds(gflops, codecs, ratio, cgi_start_time() if cgi else 0.0)


def cgi_start_time() -> float:
    """Seconds a new interpreter takes to import what `server.cgi` needs (the shared request code's
    imports, all in `contracts`); the faster of two runs, the second with warm caches."""
    argv = [sys.executable, "-c", "import contracts.codecs, contracts.limits, contracts.ops"]
    times = []
    for _ in range(2):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return min(times)


@dataclass(frozen=True)
class DurationModel:
    """Seconds per trial of each cell: what it measures (`trial_s`) and how long it takes (`wall_s`)."""

    exp: Experiment
    host: HostSpeeds
    device: DeviceProfile | None = None
    cpu_quota: float | None = None  # without a device: the client's share of this machine
    mtu: int = 1500
    server_device: DeviceProfile | None = None  # scaled: it sets what is measured, not the wall time
    replicas: int = 1  # testbeds sharing the work (their set-up runs side by side)

    def _itemsize(self) -> int:
        return np.dtype(self.exp.dtype).itemsize

    def _host_client(self) -> bool:
        """Whether the client's stages run at this machine's speed (scaled: the device's time is
        computed from CPU time, not waited for; no device: the host under its quota)."""
        return self.device is None or self.exp.mode == Mode.SCALED

    def client_compute_s(self, op: str, size: int, device: bool = True) -> float:
        if device and self.device is not None:
            return self.device.compute_s(op, size)
        return work(op, size) / (self.host.gflops * 1e9) / (self.cpu_quota or 1.0)

    def client_marshal_s(self, codec: str, direction: str, data: int, device: bool = True) -> float:
        if device and self.device is not None and method_codec(codec) in self.device.marshalling:
            return self.device.marshal_s(method_codec(codec), direction, data)
        return data / (self.host.codecs[codec][direction] * MB) / (self.cpu_quota or 1.0)

    def trial_s(
        self,
        op: str,
        size: int,
        rate_mbps: float | None,
        method: str,
        device: bool = True,
        server: bool = True,
    ) -> float:
        """The trial's completion time as measured (the devices', when there are: the client's with
        `device`, the server's with `server`)."""
        if method == LOCAL:
            return self.client_compute_s(op, size, device) + TRIAL_OVERHEAD_S
        if is_study_op(op):
            return self.rpc_trial_s(op, size, rate_mbps, method)
        if op == FETCH:
            return self.wire_s(op, size, rate_mbps, method) + TRIAL_OVERHEAD_S
        up, down = operand_bytes(op, size, self._itemsize()), result_bytes(op, size, self._itemsize())
        wire = self.wire_s(op, size, rate_mbps, method)
        sd = self.server_device if server else None
        if sd is not None and method_codec(method) in sd.marshalling:
            server_s = (
                sd.compute_s(op, size)
                + sd.marshal_s(method, "decode", up)
                + sd.marshal_s(method, "encode", down)
            )
        else:
            server_s = work(op, size) / (self.host.gflops * 1e9)
            server_s += up / (self.host.codecs[method]["decode"] * MB) + down / (
                self.host.codecs[method]["encode"] * MB
            )
        if self.exp.server_stack == Stack.CGI and method != GRPC:  # gRPC stays a long-lived server
            server_s += self.start_up_s(sd)
        client = self.client_marshal_s(method, "encode", up, device)
        client += self.client_marshal_s(method, "decode", down, device)
        return client + wire + server_s + TRIAL_OVERHEAD_S

    def rpc_trial_s(self, op: str, size: int, rate_mbps: float, method: str) -> float:
        """An RPC study's batch at host speed: each call (and the untimed first) its transport's cost
        per call and per value marshalled, and its bytes at the link's goodput (none unshaped)."""
        up, down = expected_bytes(op, size, method)
        values = 0 if op == SAY_HELLO else size * (2 if op == LARGE_DATA else 1)
        wire = 0.0
        if not is_unshaped(rate_mbps):
            wire = (up + down + 2 * TCP_HEADERS) / (expected_goodput(int(rate_mbps * 1e6), self.mtu) / 8)
        per_call = CALL_S[method] + values * VALUE_S[method] + wire
        return ((self.exp.calls_of(rate_mbps) or 1) + 1) * per_call + TRIAL_OVERHEAD_S

    def start_up_s(self, server_device: DeviceProfile | None) -> float:
        """A CGI request's process start-up: the server device's figure when its profile has one (what
        the trial measures, scaled), else this host's (what it takes here)."""
        if server_device is not None and "server_start" in server_device.stack:
            return server_device.stack["server_start"]
        return self.host.cgi_start_s

    def wire_s(self, op: str, size: int, rate_mbps: float | None, method: str) -> float:
        """Seconds the trial's bytes take on the shaped link, both ways (none for a local trial)."""
        if method == LOCAL:
            return 0.0
        goodput = expected_goodput(int(rate_mbps * 1e6), self.mtu) / 8  # bytes/s
        if op == FETCH:  # the dataset's bytes, and a request's round trip per file (one at a time)
            total = lookup(self.exp.dataset_of(size)).total(self.exp.seed)
            return total / goodput + size * (HTTP_HEADERS / goodput + FETCH_FILE_S)
        if (op, size, method) in self.host.bodies:
            up, down = self.host.bodies[(op, size, method)]
        else:
            ratio = self.host.wire_ratio[method]
            up = operand_bytes(op, size, self._itemsize()) * ratio
            down = result_bytes(op, size, self._itemsize()) * ratio
        return (up + HTTP_HEADERS) / goodput + (down + HTTP_HEADERS) / goodput

    def cpu_share(self) -> float:
        """The part of a testbed's time its timed CPU stages take (at this host's speed), over the
        grid: what the host-wide CPU lock lets replicas overlap is the rest, so about 1 / share
        testbeds keep the CPU busy; more only wait for the lock."""
        cells = [c[:4] for c in self._cells()]
        wall = sum(self.wall_s(*c) for c in cells)
        cpu = sum(self.wall_s(*c) - self.wire_s(*c) - TRIAL_OVERHEAD_S for c in cells)
        return max(cpu, 0.0) / wall if wall else 1.0

    def wall_s(self, op: str, size: int, rate_mbps: float | None, method: str) -> float:
        """How long the trial occupies the testbed: in scaled mode the client works at this host's speed."""
        return self.trial_s(op, size, rate_mbps, method, device=not self._host_client(), server=False)

    def cell_s(self, cell: tuple) -> float:
        """The sweep's wall time per trial of the cell (op, size, rate, method, server): a testbed's,
        shared by the replicas. Every gRPC server is taken to work at the Python server's measured
        speed (this model knows no other). A delay the sweep varies (marked in the cell) adds three
        round trips (the handshake, the request and the reply; slow start is not modelled)."""
        marked = dict(x for x in cell[5:] if isinstance(x, tuple))
        return (self.wall_s(*cell[:4]) + 3 * 2 * marked.get("delay", 0.0) / 1000) / self.replicas

    def setup_s(self) -> float:
        """Per point of the link, iperf3 both ways (the first attempt) and, with netem, its round trips
        and loss (`testbed.link.delay_loss`: about 5 s); and the warm-up trials of every phase."""
        exp, smallest = self.exp, min(self.exp.sizes)
        validation = 2 * exp.validation.duration + 1 if exp.validation.enabled else 0
        total = len(exp.link_points()) * (validation + (5 if exp.needs_netem and validation else 0))
        for rate in ([None] if exp.local else []) + list(exp.rates_mbps):
            total += exp.warmup * sum(
                self.wall_s(op, min(exp.sizes_of(op), default=smallest), rate, m)
                for op in exp.ops
                for m in ([LOCAL] if rate is None else [m for m, _ in offloads(exp.methods, exp.servers, op)])
            )
        return total

    def _cells(self) -> list[tuple]:
        exp = self.exp
        grid = [(op, size) for op in exp.ops for size in exp.sizes_of(op)]
        cells = [(op, size, None, LOCAL, "") for op, size in grid] if exp.local else []
        return cells + [
            (o, s, p.rate_mbps, m, v, *(("delay", p.delay_ms),) * (p.delay_ms is not None))
            for o, s in grid
            for p in exp.link_points()
            for m, v in offloads(exp.methods, exp.servers, o)
        ]

    def sweep_s(self, reps: int) -> float:
        """Seconds for the whole grid at `reps` repetitions per cell, set-up included (the replicas'
        set-ups side by side). Replicas are taken to overlap fully: the CPU lock's waits are not in it
        (`cpu_share` says how many testbeds the host keeps busy)."""
        # several clients: a cell offloaded by k at once is k trials a repetition, which share the link
        # (each about k times as long to transfer) side by side: about k trials' time, one after another
        k = sum(self.exp.contention) or 1
        if self.exp.datasets:  # a fetch cell per transfer setting, concurrency included
            k = len(self.exp.transfer_settings()) * max(1, len(self.exp.concurrency))
        return (
            reps * sum(self.cell_s(c) * (1 if c[3] == LOCAL else k) for c in self._cells()) + self.setup_s()
        )

    def duration_s(self) -> tuple[float, float]:
        """The fewest and the most seconds: every cell at `min_reps`, every cell at `reps` (equal if fixed)."""
        low = self.exp.min_reps if self.exp.adaptive else self.exp.reps
        return self.sweep_s(low), self.sweep_s(self.exp.reps)


def model_for(
    exp: Experiment,
    device: DeviceProfile | None,
    cpu_quota: float | None,
    server_device: DeviceProfile | None = None,
) -> DurationModel:
    cgi = exp.server_stack == Stack.CGI
    host = measure_host(exp.methods, exp.dtype, exp.seed, cgi, exp.int_range, exp.codec_text)
    return DurationModel(exp, host, device, cpu_quota, server_device=server_device, replicas=exp.replicas)


def replica_hint(share: float, running: int) -> str | None:
    """What replicas give a sweep on this host, from the timed CPU work's share of a testbed's time: said
    when several run, or when one leaves the CPU idle most of the time (then as the option to use)."""
    fit = max(1, int(1 / max(share, 0.01)))
    if running > 1:
        return f"timed CPU work is {share:.0%} of a testbed's time: about {fit} testbeds can share this host's CPU lock (running {running})"
    if share < 0.5 and fit > 1:
        return f"timed CPU work is {share:.0%} of a testbed's time: --replicas {fit} would keep this host's CPU busy"
    return None


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"
