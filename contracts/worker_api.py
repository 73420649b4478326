"""The trial worker's boundary: what the orchestrator asks of it and what it answers, typed.

The sweep's link (`testbed.sweep.worker_link`) sends the client host's worker (`client.worker`) one
`TrialSpec` per JSON line and reads back one `TrialResult`; both ends encode and decode them with
`contracts.message` (`to_json`, `from_json`), so a key one side writes and the other does not
know is a `TypeError` where it is read (a bug: the two ends are one version), not a value dropped.

How the worker emulates the devices is a `WorkerEmulation`, given once as its command line's flags
(`testbed.sweep.worker_link.emulation_args`).

The JSON is what the two ends exchanged before these types: the spec's eight keys (and a fetch's
`concurrency` and `dataset`, an RPC study's `calls`), and the result's
flat keys, each a column of `trials.csv` (`contracts.run.TrialRecord`), present only when the trial
has a value for it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from contracts.calibration import Calibration, CalibrationRow
from contracts.message import Message, omitted


@dataclass(frozen=True)
class TrialSpec(Message):
    """One trial for the worker: what to compute (op, size, dtype), and how (a method; for `grpc` the
    server's language; the transfer settings: connections and write size, None: not varied)."""

    trial: int  # the plan's trial number (-1: a warm-up, untimed as a reference run)
    op: str
    size: int
    dtype: str
    method: str  # a codec, a transport (grpc), or local
    server: str | None = None  # the gRPC server's language (None or "": Python's)
    parallelism: int | None = None  # connections the request and reply are split over (None: one)
    io_kb: int | None = None  # the client's write size, KiB (None: the whole body at once)
    # a fetch (op `fetch`, `contracts.datasets`): its files at once and its dataset; absent otherwise
    # (an offload's concurrency is its request streams, not the worker's to know)
    concurrency: int | None = omitted()
    dataset: str | None = omitted()
    # an RPC study's (`contracts.rpc_study`): the calls its batch makes; absent otherwise
    calls: int | None = omitted()


@dataclass(frozen=True, kw_only=True)
class TrialResult(Message):
    """What the worker measured of one trial: whether it ran (`ok`, else `error`), its stage times in
    seconds and bytes on the wire, and with device emulation what was measured before scaling (the
    `wall_*` and `cpu_*` times). Every field is the `trials.csv` column of its name; the columns the
    orchestrator adds (`emulation_flagged`, `replica`, `repair`) are not the worker's to say, so they
    are not fields here: `testbed.sweep.bookkeeping.trial_row` takes them beside the result."""

    trial: int | None = omitted()
    started_at: str | None = omitted()  # ISO 8601, UTC, when its timed work began
    ok: bool
    error: str | None = omitted()  # why it failed (the first 500 characters)
    connection: str | None = omitted()  # a remote trial's connection policy
    codec_text: str | None = omitted()  # the text its worker's JSON codecs write (CODEC_TEXTS)
    t_total: float | None = omitted()
    cpu_total: float | None = omitted()  # a local trial's CPU seconds
    wall_total: float | None = omitted()  # scaled: a local trial's measured wall time
    t_client_encode: float | None = omitted()
    t_request: float | None = omitted()
    t_server_decode: float | None = omitted()
    t_server_compute: float | None = omitted()
    t_server_encode: float | None = omitted()
    t_client_decode: float | None = omitted()
    t_comm: float | None = omitted()
    bytes_up: int | None = omitted()
    bytes_down: int | None = omitted()
    cpu_client_encode: float | None = omitted()
    cpu_client_decode: float | None = omitted()
    cpu_server_decode: float | None = omitted()
    cpu_server_compute: float | None = omitted()
    cpu_server_encode: float | None = omitted()
    t_server_start: float | None = omitted()
    cpu_server_start: float | None = omitted()
    t_server_queue: float | None = omitted()
    wall_client_encode: float | None = omitted()
    wall_client_decode: float | None = omitted()
    wall_server_decode: float | None = omitted()
    wall_server_compute: float | None = omitted()
    wall_server_encode: float | None = omitted()
    wall_server_start: float | None = omitted()
    # an RPC study's batch (`client.rpc_calls.Batch`): its calls, one call's time (median, p99) and the
    # server's CPU per call (median); bytes_up/down are one call's messages as its transport frames them
    calls: int | None = omitted()
    t_call_median: float | None = omitted()
    t_call_p99: float | None = omitted()
    cpu_server_call: float | None = omitted()

    def failed(self, error: str) -> TrialResult:
        """This result failed, saying why: how the orchestrator marks a trial it cannot keep (what it ran
        through was wrong) while its measurements stay in the row."""
        return replace(self, ok=False, error=error)


@dataclass(frozen=True)
class WorkerEmulation:
    """What a trial worker emulates the devices with, from their hosts' calibrations: the client's
    slowdowns (scaled) with the rows whose targets they follow, or its per-work quotas (throttle);
    a server device's slowdowns with its rows; and with concurrency (scaled) the device's cores its
    client's workers share (the timeline file's path, how many). Empty fields: not emulated."""

    scale: dict[str, float] | None = None
    quotas: dict[str, float] | None = None
    rows: list[CalibrationRow] | None = None
    server_scale: dict[str, float] | None = None
    server_rows: list[CalibrationRow] | None = None
    cores: tuple[str, int] | None = None

    @classmethod
    def of_client(cls, calibration: Calibration) -> WorkerEmulation:
        """What the worker takes of its client host's calibration."""
        return cls(scale=calibration.scale, quotas=calibration.quotas, rows=calibration.rows)

    @classmethod
    def of_server(cls, calibration: Calibration) -> WorkerEmulation:
        """What the worker takes of the server host's calibration (scaled: its slowdowns and rows)."""
        return cls(server_scale=calibration.scale, server_rows=calibration.rows)

    def with_server(self, server: WorkerEmulation | None) -> WorkerEmulation:
        """This client's emulation with the server device's of `server` (None: no server device):
        every client host's worker follows the one server."""
        if server is None:
            return self
        return replace(self, server_scale=server.server_scale, server_rows=server.server_rows)
