"""A run's manifest.json: `Manifest` and its sections (`Experiment`, `Session`, `LinkCheck`, `Counters`,
`Device`, `Calibration`, `Repair`), `read_manifest`, the one reader, and `write_manifest`.

What was planned, on what, and what happened to the run; rewritten whole as the sweep goes. Its
`format_version` is `contracts.run_format`'s (absent in version 1).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field, fields
from pathlib import Path

from contracts.calibration import Calibration
from contracts.errors import UserError
from contracts.grid import LinkPoint, rate_from_json, rates_to_json, sizes_for
from contracts.message import decode, encode_fields
from contracts.processes import alive
from contracts.profiles import CpuProfile
from contracts.run_format import FORMAT_VERSION, check_version
from contracts.stages import COMPACT, LOCAL, PER_TRIAL, PERSISTENT, PYTHON, offload_label, offloads
from contracts.tolerance import DEFAULT_MS, DEFAULT_PCT, DeviceTolerance

MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class Validation:
    """How a sweep checks each rate's link with iperf3 before trusting it."""

    enabled: bool = True
    tolerance_pct: float = 5.0
    duration: int = 2  # seconds per direction
    retries: int = 1  # further attempts before a rate is given up


@dataclass(frozen=True)
class Experiment:
    """What a sweep measures, resolved (file < flags); the manifest's `experiment` section."""

    name: str
    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    rates_mbps: tuple[float, ...]
    methods: tuple[str, ...]
    reps: int  # the fixed count, or the most an adaptive cell runs
    warmup: int = 1
    dtype: str = "float64"
    seed: int = 1
    client_cpu: CpuProfile | None = None  # None: the inventory's profile
    client_device: str | None = None  # a device profile (name or path); None: the inventory's
    mode: str = "scaled"  # how a device profile is emulated (contracts.device.MODES)
    validation: Validation = field(default_factory=Validation)
    local: bool = True  # measure the local baseline
    trial_timeout: float = 600.0
    min_reps: int | None = None  # adaptive: a cell may stop after this many (None: always `reps`)
    precision: float | None = None  # adaptive: also stop only once the mean's 95% CI is this fraction
    connection: str = PER_TRIAL  # a new TCP connection per remote trial, or PERSISTENT
    server_device: str | None = None  # the server's device profile (name or path); None: the inventory's
    replicas: int = 1  # embedded testbeds side by side that share the work (testbed.backends.replicas)
    server_stack: str = "wsgi"  # how the server runs requests (SERVER_STACKS); runs before format 4: wsgi
    servers: tuple[str, ...] = (PYTHON,)  # the gRPC servers the method grpc offloads to (GRPC_SERVERS)
    clients: int = 1  # client hosts on the testbed, each the experiment's client device
    # how many of them offload each cell at once, each a dimension's value (empty: the sweep has one)
    contention: tuple[int, ...] = ()
    server_workers: int = 1  # requests the server works on at once (python -m server --work-slots)
    # several clients: None, closed loop (each client's next trial when its last one ends); a rate,
    # open loop (each client's trials arrive as a seeded Poisson process of this many per second, and
    # one that arrives while the last still runs starts when it ends)
    arrivals_hz: float | None = None
    # the transfer settings of the energy-performance study, each a dimension (empty: not varied):
    # connections one request is split over, and the client's write size in KiB
    parallelism: tuple[int, ...] = ()
    io_kb: tuple[int, ...] = ()
    # requests each client has outstanding at once, a dimension (empty: one at a time): its device's
    # cores serve their stages in turn (`client.device_cores`), their transfers share the link
    concurrency: tuple[int, ...] = ()
    # clients of several devices (`clients: [{device, count}, ...]`): each client host's device, client
    # 1 first (`client_device` is client 1's); empty: every client is `client_device`
    client_devices: tuple[str, ...] = ()
    # how far an emulated device's stage may miss its target: max(pct of it, ms) (contracts.tolerance);
    # a manifest written before these keys reads with the defaults (its calibrations say their own)
    device_tolerance_pct: float = DEFAULT_PCT
    device_tolerance_ms: float = DEFAULT_MS
    # the operands as the paper's software made them (issue 45): the integer operands' [low, high)
    # (`contracts.operands`; None: each op's own range) and the JSON codecs' text (CODEC_TEXTS);
    # a manifest before format 10 reads as what it ran, None and compact
    int_range: tuple[int, int] | None = None
    codec_text: str = COMPACT
    # the link's one-way delays (ms, added in each direction: the round trip is twice one plus the
    # link's own) and losses (% per direction), each a dimension beside the rates, shaped with netem
    # and validated per group (empty: not varied, the inventory's; a manifest before format 11: empty)
    delays_ms: tuple[float, ...] = ()
    losses_pct: tuple[float, ...] = ()
    # the energy study's datasets a transfer sweep fetches (`contracts.datasets`; op fetch, each
    # dataset's size its number of files); empty: an offload sweep. Before format 12: empty
    datasets: tuple[str, ...] = ()
    # an image file the image ops run on (`contracts.images`), its pixel count among `sizes`; None:
    # generated images only (a manifest before format 11 reads as None, which is what it ran)
    image: str | None = None
    # an RPC study (`rpc:`, `contracts.rpc_study`; docs/rpc-study.md): the calls each trial makes, and
    # each operation's own sizes, (op, sizes) pairs (written as a mapping); None and empty: an
    # offload sweep. Before format 14: none
    calls: int | None = None
    op_sizes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # ... and where its calls differ by rate, (rate, calls) pairs (written as [rate, calls] lists, the
    # unshaped link's rate as `none`); empty: `calls` at every rate
    calls_at: tuple[tuple[float, int], ...] = ()

    def as_dict(self) -> dict:
        data = encode_fields(self)  # a calibration's rows in their own form (contracts.calibration)
        data["rates_mbps"] = rates_to_json(self.rates_mbps)  # the unshaped link as `none`
        data["op_sizes"] = {op: list(sizes) for op, sizes in self.op_sizes}
        data["calls_at"] = [[rates_to_json([r])[0], n] for r, n in self.calls_at]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Experiment:
        data = dict(data)
        cpu = data.pop("client_cpu", None)
        val = data.pop("validation", None) or {}
        op_sizes = data.pop("op_sizes", None) or {}
        calls_at = tuple((rate_from_json(r), int(n)) for r, n in data.pop("calls_at", None) or ())
        data["rates_mbps"] = [rate_from_json(r) for r in data.get("rates_mbps", [])]
        return cls(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()},
            client_cpu=CpuProfile(**cpu) if cpu else None,
            validation=Validation(**val),
            op_sizes=tuple((op, tuple(sizes)) for op, sizes in dict(op_sizes).items()),
            calls_at=calls_at,
        )

    def calls_of(self, rate_mbps: float | None) -> int | None:
        """An RPC study's calls a trial at this rate makes (None: not an RPC study)."""
        return dict(self.calls_at).get(rate_mbps, self.calls)

    @property
    def rpc_study(self) -> bool:
        """Whether it is an RPC study's sweep: each trial a batch of `calls` calls (docs/rpc-study.md)."""
        return self.calls is not None

    def sizes_of(self, op: str) -> tuple[int, ...]:
        """The sizes `op` runs at: an RPC study's operation at its own, an image op at the image sizes,
        a matrix op at the matrix sizes (`contracts.grid.sizes_for`)."""
        own = dict(self.op_sizes)
        return own[op] if op in own else sizes_for(op, self.sizes)

    @property
    def device_tolerance(self) -> DeviceTolerance:
        """The one rule its device stages are judged by: calibration, trials' fidelity, flags."""
        return DeviceTolerance(self.device_tolerance_pct, self.device_tolerance_ms)

    @property
    def adaptive(self) -> bool:
        return self.min_reps is not None

    def transfer_settings(self) -> list[tuple[int | None, int | None]]:
        """The transfer settings it varies, (parallelism, io_kb) each: every combination, or (None,
        None) once when it varies none."""
        return [(p, io) for p in self.parallelism or (None,) for io in self.io_kb or (None,)]

    def offload_labels(self) -> list[str]:
        """Its ways to offload as the analysis names them (`contracts.stages.offload_label`): each
        method and server, with each transfer setting and each number of clients at once it varies."""
        return [
            offload_label(method, server, k, p, io, c)
            for method, server in offloads(self.methods, self.servers)
            if method != LOCAL
            for p, io in self.transfer_settings()
            for c in self.concurrency or (None,)
            for k in self.contention or (None,)
        ]

    def link_points(self) -> list[LinkPoint]:
        """Every point of its link: each rate with each delay and each loss it varies, in the order the
        trials are numbered (`testbed.sweep.plan`)."""
        return [
            LinkPoint(rate, delay, loss)
            for rate in self.rates_mbps
            for delay in self.delays_ms or (None,)
            for loss in self.losses_pct or (None,)
        ]

    @property
    def needs_netem(self) -> bool:
        """Whether a delay or a loss it varies is more than none (netem shapes it)."""
        return any(self.delays_ms) or any(self.losses_pct)

    @property
    def together(self) -> bool:
        """Several requests in flight at once (several clients, or a client's concurrency): the
        server's work slots and pacing, and the cells run by one worker per request stream."""
        return self.clients > 1 or (max(self.concurrency, default=1) > 1 and not self.datasets)

    def dataset_of(self, size: int) -> str | None:
        """A transfer sweep's dataset of this size (its number of files); None: not a transfer sweep."""
        from contracts.datasets import DATASETS

        return {DATASETS[n].files: n for n in self.datasets if n in DATASETS}.get(size)

    def describe_reps(self) -> str:
        if not self.adaptive:
            return f"{self.reps} rep(s)"
        within = f", precision {self.precision:g}" if self.precision is not None else ""
        return f"{self.min_reps}..{self.reps} rep(s) (adaptive{within})"


@dataclass(slots=True)
class Session:
    """One `testbed sweep` of the run, first or resumed."""

    started_at: str
    skipped_done: int
    status: str  # running, then complete, stopped (a problem to fix, named in one line) or interrupted
    pid: int | None = None
    hostname: str | None = None
    ended_at: str | None = None
    # a sweep over several testbeds: each one's replica number, inventory, prefix and backend
    testbeds: list[dict] | None = None
    # the switch's datapath as the testbeds' `up` chose it: system (the kernel's) or netdev (userspace);
    # several testbeds that differ: both, comma-separated. None: a run from before it was recorded
    datapath: str | None = None
    # an RPC study's links: True, each packet held for its bytes at the rate by netem beside HTB (no
    # message crosses faster than a line of the rate); False, HTB alone (the appliance's kernel had no
    # netem); None: not an RPC study, or a run from before it was recorded
    serialized: bool | None = None
    # the cores whose spinner held them while a replica's short stage was timed (`contracts.other_cores`):
    # [] none (one testbed on this machine); None: a run from before it was recorded
    held_cores: list[int] | None = None


@dataclass(slots=True)
class LinkCheck:
    """One iperf3 check of one direction of a rate's link (or a rate whose validation was skipped);
    where the link has a delay or a loss, also one check of its round trip (by ping, by TCP handshake)
    or of its loss (`measure`; `testbed.link.delay_loss`)."""

    rate_mbps: float
    direction: str | None = None  # up: client->server, down: server->client
    expected_mbps: float | None = None
    measured_mbps: float | None = None
    error_pct: float | None = None
    ok: bool | None = None
    retransmits: int | None = None
    error: str | None = None
    attempt: int | None = None
    at: str | None = None
    skipped: str | None = None  # why it was not checked
    replica: int | None = None  # whose link (None: the sweep had one testbed)
    # the link's point beside its rate: one-way delay (ms) and loss (% per direction), when the sweep
    # or the inventory sets them (None: not set; absent before format 11)
    delay_ms: float | None = None
    loss_pct: float | None = None
    # a netem check: what it measured (`rtt ping`, `rtt tcp` in ms; `loss` in % per direction), its
    # target, what was measured, the interval it is accepted in, and the samples (None: goodput)
    measure: str | None = None
    expected: float | None = None
    measured: float | None = None
    low: float | None = None
    high: float | None = None
    samples: int | None = None


@dataclass(slots=True)
class Counters:
    """The appliance's counters around one rate's trials: per port HTB (exact) and OVS statistics."""

    rate_mbps: float
    ports: dict[str, str]  # up/down -> interface
    trials: list[int] = field(default_factory=list)
    before: dict | None = None
    after: dict | None = None
    error: str | None = None
    replica: int | None = None
    delay_ms: float | None = None  # the link's point beside its rate (None: not set by the sweep)
    loss_pct: float | None = None


@dataclass(slots=True)
class Repair:
    """Something the sweep found broken while it ran, and what it did about it."""

    at: str
    part: str  # what was broken: shaping, switch, server, iperf3
    why: str  # what was measured
    done: str  # what the sweep did
    ok: bool  # whether that repaired it (if not, the part's remaining trials failed with the reason)
    trials: list[int] = field(default_factory=list)  # the trials it affected (not kept as ok)
    replica: int | None = None  # whose testbed


@dataclass(slots=True)
class Device:
    """The emulated client device: its profile (contracts.device.DeviceProfile.as_dict) and how it held."""

    profile: dict
    mode: str
    calibrations: list[Calibration] = field(default_factory=list)


@dataclass(slots=True)
class Manifest:
    """manifest.json: what was planned, on what, and what happened to the run."""

    run_id: str
    status: str  # running, then complete, stopped (a problem to fix, named in one line) or interrupted
    experiment: Experiment
    inventory: str = ""
    client_cpu: dict | None = None  # the inventory's CpuProfile, as a dict
    environment: dict = field(default_factory=dict)  # versions and machine facts
    planned_trials: int | None = None
    validation: list[LinkCheck] = field(default_factory=list)
    counters: list[Counters] = field(default_factory=list)
    started_at: str | None = None
    ended_at: str | None = None
    sessions: list[Session] = field(default_factory=list)
    estimate_s: list[float] | None = None  # the duration estimated before the first session
    # the same grid on one testbed at every cell's most repetitions: what replicas and the stopping
    # rule save is measured against it (`benchmarks/grid.py`)
    estimate_one_testbed_s: float | None = None
    device: Device | None = None  # the client's device (None: the client ran as its host)
    server_device: Device | None = None  # the server's (None: the server ran as its host)
    # clients of several devices: each device after client 1's (which is `device`), in the order of
    # the experiment's `client_devices`
    client_devices: list[Device] = field(default_factory=list)
    # clients of several devices: each client host's device by its profile's name, client 1 first, as
    # the sweep loaded the profiles (empty: one device, or a run from before the field)
    client_device_names: list[str] = field(default_factory=list)
    repairs: list[Repair] = field(default_factory=list)
    format_version: int = FORMAT_VERSION  # as read (1: written before versioning); saved as this one

    def as_dict(self) -> dict:
        return encode_fields(self)  # a calibration's rows in their own form (contracts.calibration)

    @classmethod
    def from_dict(cls, data: dict, path: Path = Path(MANIFEST_FILE)) -> Manifest:
        """A manifest of any version up to ours (version 1 had no `format_version`)."""
        version = data.get("format_version", 1)
        if not isinstance(version, int):
            raise UserError(f"{path}: format_version is {version!r}, not a number", "repair it")
        check_version(version, path)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"{path} has unknown key(s) {', '.join(unknown)}", "repair it or move it away")

        def device_of(device: dict | None) -> Device | None:
            if device is None:
                return None
            calibrations = [decode(Calibration, c) for c in device.get("calibrations", [])]
            return Device(**{**device, "calibrations": calibrations})

        try:
            return cls(
                **{
                    **data,
                    "format_version": version,
                    "experiment": Experiment.from_dict(
                        {"connection": PERSISTENT, **data["experiment"]}
                        if version < 3
                        else data["experiment"]
                    ),
                    "validation": [LinkCheck(**v) for v in data.get("validation") or []],
                    "counters": [Counters(**c) for c in data.get("counters") or []],
                    "sessions": [Session(**s) for s in data.get("sessions") or []],
                    "repairs": [Repair(**r) for r in data.get("repairs") or []],
                    "device": device_of(data.get("device")),
                    "server_device": device_of(data.get("server_device")),
                    "client_devices": [device_of(d) for d in data.get("client_devices") or []],
                }
            )
        except (KeyError, TypeError) as exc:
            raise UserError(
                f"{path} does not hold a run's manifest ({exc})", "repair it or move it away"
            ) from None

    def client_device(self, name: str | None) -> Device | None:
        """The client device of that name (a profile's `name`), among every client device of the run;
        None: no such device (None asks for client 1's)."""
        if name is None:
            return self.device
        for device in (self.device, *self.client_devices):
            if device is not None and device.profile.get("name") == name:
                return device
        return None

    def killed(self) -> bool:
        """A run whose sweep was killed (-9) still says "running"; its process, on this host, is gone."""
        last = self.sessions[-1] if self.sessions else None
        return (
            self.status == "running"
            and last is not None
            and isinstance(last.pid, int)
            and last.hostname == platform.node()
            and not alive(last.pid)
        )


def read_manifest(path: Path) -> Manifest:
    """The one reader of manifest.json; a killed run's status reads as "interrupted"."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(
            f"{path} does not exist", "pass the directory of a run made by testbed sweep"
        ) from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}", "repair it or move it away"
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} does not hold a JSON object", "repair it or move it away")
    manifest = Manifest.from_dict(data, path)
    if manifest.killed():
        manifest.status = "interrupted"
    return manifest


def write_manifest(path: Path, manifest: Manifest) -> None:
    """Rewritten whole and atomically, so a reader never sees half a manifest."""
    manifest.format_version = FORMAT_VERSION  # converted: what is written is this version's
    text = json.dumps(manifest.as_dict(), indent=2)  # a value JSON cannot hold is a bug
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:  # e.g. a full file system: the manifest stays as it was, and no half copy lingers
        tmp.unlink(missing_ok=True)
        raise
