"""A device calibration, typed: each kind of work's target, what the emulation achieved, the error.

A host calibrates (`client.calibration`: the scaled mode's slowdowns and their check, or the throttle
mode's check under quotas) and answers a `Calibration` as JSON; the orchestrator completes it
(`testbed.sweep.device_emulation`: the throttle quotas, the extra quota of a slower host) and records
it in the run's manifest (`contracts.run.Manifest`, under its device), whose readers get the same
type back. Each row says its kind of work (`kind`, and `codec` for a method's), so nobody parses the
label a reader sees (`work`: `kernel`, `json encode`, `raw kernel`, `server_start`).

The JSON is what manifests held before these types (every stored run reads as it was written): a
row is an object with that `work` label and only the optional keys it has a value for.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.device import key, stack_key
from contracts.message import decode_fields, encode_fields, omitted
from contracts.stages import SERVER_START
from contracts.steadiness import Steadiness
from contracts.tolerance import DeviceTolerance

KERNEL, ENCODE, DECODE = "kernel", "encode", "decode"  # the kinds of work a trial times, with SERVER_START


def work_key(kind: str, op: str, size: int | None, codec: str | None = None) -> str:
    """The calibration's key of a kind of work (`contracts.device.key`; the start-up's is its stack key)."""
    return stack_key(SERVER_START) if kind == SERVER_START else key(kind, op, size, codec)


@dataclass(frozen=True)
class CalibrationRow:
    """One kind of work of a calibration: its device's target, what the emulation achieved, the error.

    `codec`: the method whose work it is (its codec's encode or decode, or on the server's cgi stack
    the kernel in that method's requests); None for the kernel of every method and the stack's
    start-up (op `any`, no size). The optional fields are what the mode measured: scaled, this host's
    CPU seconds and the slowdown; throttle, the quota it ran under, its period, and the first check's
    error when the quota was corrected; both, the samples taken and why a flagged row missed."""

    key: str
    kind: str  # KERNEL, ENCODE, DECODE or SERVER_START
    codec: str | None
    op: str
    size: int | None
    target_s: float
    achieved_s: float
    error_pct: float
    flagged: bool
    reason: str | None = omitted()
    host_cpu_s: float | None = omitted()
    slowdown: float | None = omitted()
    period_s: float | None = omitted()
    samples: int | None = omitted()
    quota: float | None = omitted()
    first_error_pct: float | None = omitted()

    @classmethod
    def of(
        cls,
        kind: str,
        codec: str | None,
        op: str,
        size: int | None,
        target: float,
        achieved: float,
        tolerance: DeviceTolerance,
        **measured,
    ) -> CalibrationRow:
        """A kind of work's row from its target and what was achieved: the error, and whether it is
        outside the tolerance (`measured`: the mode's optional fields)."""
        error = (achieved - target) / target * 100
        return cls(
            key=work_key(kind, op, size, codec),
            kind=kind,
            codec=codec,
            op=op,
            size=size,
            target_s=target,
            achieved_s=achieved,
            error_pct=round(error, 2),
            flagged=tolerance.missed(target, achieved),
            **measured,
        )

    @property
    def work(self) -> str:
        """The label a reader sees: the kind of work, after its method's codec if it has one."""
        return self.kind if self.codec is None else f"{self.codec} {self.kind}"

    def as_dict(self) -> dict:
        """As the manifest holds it: `work` for the kind and codec, in the place it always had."""
        fields = encode_fields(self)
        del fields["kind"], fields["codec"]
        return {"key": fields.pop("key"), "work": self.work, **fields}

    @classmethod
    def from_dict(cls, data: dict) -> CalibrationRow:
        """A row as the manifest (or a host's answer) holds it; a key the row lacks is a TypeError.
        Rows written before the throttle mode's per-work quotas have no `key`: it is derived, as now."""
        data = dict(data)
        codec, _, kind = data.pop("work").rpartition(" ")  # the label's one reader
        fields = {**data, "kind": kind, "codec": codec or None}
        if "key" not in fields and "op" in fields and "size" in fields:
            fields["key"] = work_key(kind, fields["op"], fields["size"], codec or None)
        return decode_fields(cls, fields)


@dataclass(slots=True, kw_only=True)
class Calibration:
    """One calibration of an emulated device's host against its profile: a host's answer (`at` empty
    until the run records it), completed by the orchestrator, and the manifest's record of it (under
    its device's section, which says whose it is)."""

    at: str = ""  # when the run recorded it
    tolerance_pct: float
    # the tolerance's least miss in ms (`contracts.tolerance`); absent before it had one: pct alone
    tolerance_ms: float | None = omitted()
    rows: list[CalibrationRow]
    quota: float | None = None  # throttle: the client's quota between stages, a fraction of a core
    period_s: float | None = None  # throttle: that quota's period
    quotas: dict[str, float] | None = None  # throttle: each kind of work's quota, by key (and `base`)
    host: list[CalibrationRow] | None = None  # throttle: the host's own time for each work (its rows)
    replica: int | None = None  # whose host
    replicas: list[int] | None = None  # the testbeds on that host that use it (they share one machine)
    client: str | None = None  # a further client host's role (client2 ...); None: client 1's or the server's
    scale: dict[str, float] | None = None  # scaled: each kind of work's slowdown, as the worker applies it
    machine: dict | None = None  # the host's facts that set its speed (testbed.run_files.machine)
    reused: list[str] | None = None  # the start of each later session that used it instead of calibrating
    # whose it is, as the host answers (the manifest holds them in the device's section instead): the
    # device profile's name, the mode and the host's role (client, server)
    device: str | None = omitted()
    mode: str | None = omitted()
    role: str | None = omitted()
    # `testbed calibrate --slow-host`: held under this extra quota, a fraction of a core (never a sweep's)
    slow_host: float | None = omitted()
    # how steady the host's speed was around it (`contracts.steadiness`); absent before it was probed
    steadiness: Steadiness | None = omitted()

    @property
    def tolerance(self) -> DeviceTolerance:
        """The tolerance its rows were judged by, as it recorded it."""
        return DeviceTolerance(self.tolerance_pct, self.tolerance_ms or 0.0)

    def row_dicts(self) -> list[dict]:
        """The rows as the manifest holds them (what a table of them is made from)."""
        return [row.as_dict() for row in self.rows]
