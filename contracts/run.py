"""A run's files as one typed, versioned contract: `trials.csv` and `manifest.json`.

The sweep writes them and everything else (resume, the stopping rule, the analysis) reads them only
through this module, so there is one reader per file and one meaning per field.

Versions (Flent's `resultset.py` is the model: refuse newer, convert older on load):
- 1: runs written before this module: no mark anywhere. They load as they are (the columns and keys
  are the same; version 1's manifest had no `format_version`).
- 2: `trials.csv` begins with the line `# offload-testbed trials format 2`; `manifest.json` has
  `"format_version": 2` and only the sections typed below.
- 3: trials gain `repair` (what the sweep repaired before the row's trial ran again),
  `connection` (per-trial or persistent) and the server's measured stages (`wall_server_*`,
  `cpu_server_*`); the experiment its `connection` and `server_device`, the manifest
  `server_device`. Older files load as they are (empty columns; their experiment's connection reads
  as persistent, which is how their remote trials ran) and are rewritten in version 3's columns on
  resume.
- 4: the columns `t_server_start` and `cpu_server_start` (the cgi stack's per-request process
  start-up, wall and CPU seconds) and `replica` (which testbed of a sweep over several ran it, as
  the manifest's validation, counters, repairs, calibrations and sessions' `testbeds` say); the
  experiment's `server_stack` and `replicas`; a calibration's `replicas` (the testbeds on one machine
  that share it; absent: its own testbed's), and later within version 4 its `scale` (the slowdowns
  the trials applied), `machine` (the facts of the host it ran on) and `reused` (the later sessions
  that used it again; absent in older files, whose resumed sessions calibrate). Runs of versions 1 to 3 load with the column empty and the stack `wsgi` (the only
  one they had); resuming one rewrites its trials.csv in version 4's columns first.
- 5: the column `server` (the language of the gRPC server a `grpc` row offloaded to, of
  `contracts.trials.GRPC_SERVERS`; `python` for every HTTP row; empty for local rows) and the
  experiment's `servers`. Older runs load with the column empty, which means Python (their only
  server), and `servers` `["python"]`; resuming one rewrites its trials.csv in version 5's columns.
- 6: the column `t_server_queue` (a request's wait at the server for a work slot once its body had
  arrived: `contracts.trials.SERVER_QUEUE`; communication excludes it, the completion time includes
  it). Older runs load with it empty (their communication includes what little queueing one client
  met); resuming one rewrites its trials.csv in version 6's columns.
- 7: the columns `client` (which client host of several ran the trial, 1..N) and `clients` (how many
  clients offloaded the cell at once), empty for a sweep with one client; the experiment's `clients`
  (client hosts), `contention` (the numbers of them offloading at once), `server_workers` and
  `arrivals_hz` (open loop; absent: closed loop); the transfer settings `parallelism` and `io_kb`,
  as columns and as the experiment's dimensions (empty: not varied). Older
  runs load with them empty and one client; resuming one rewrites its trials.csv in version 7's
  columns.
- 8: the columns `concurrency` (the requests one client had outstanding at once in the cell) and
  `stream` (which of them ran the trial, 1..concurrency), empty when the sweep does not vary it, and
  the experiment's `concurrency` dimension (empty: one request at a time). Older runs load with them
  empty; resuming one rewrites its trials.csv in version 8's columns.
- 9: the column `device` (the client device a row ran as, when the sweep's clients are of several
  devices: `clients: [{device, count}, ...]`), empty when the clients are of one device or none; the
  experiment's `client_devices` (each client host's device, client 1 first; empty: one device) and
  the manifest's `client_devices` (every client device after the first, which stays in `device`,
  each with its calibrations). Older runs load with them empty; resuming one rewrites its
  trials.csv in version 9's columns. Later within version 9, a calibration's `client`: the role
  of the further client host it calibrated (`client2` ...: the first client of a further device,
  and an SSH lab's client machines, which each calibrate, under their device's section); absent
  for client 1's, the server's and older files'.
  And the manifest's `client_device_names`: each client host's device by its profile's name, as the
  sweep loaded the profiles (older runs: empty, and the analysis reads the names off the
  experiment's references, a profile's name or its file's stem).

Writing a field the schema does not know is a bug and raises `TypeError` with its traceback (the
trial record and every manifest section are dataclasses, built with keywords). Reading a file of a
newer version is the user's to fix (a newer tool wrote it) and says so in one line.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import platform
import zlib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from contracts.calibration import Calibration
from contracts.dataclass_json import decode, encode_fields
from contracts.errors import UserError
from contracts.processes import alive
from contracts.profiles import CpuProfile
from contracts.trials import LOCAL, PER_TRIAL, PERSISTENT, PYTHON, STAGES, offload_label, offloads

FORMAT_VERSION = 9
TRIALS_MARK = "# offload-testbed trials format "
TRIALS_FILE = "trials.csv"
PACKED_TRIALS_FILE = TRIALS_FILE + ".gz"  # a shipped run's trials (`analysis.reproduction`)
MANIFEST_FILE = "manifest.json"
_FIX_FORMAT = "trials.csv needs the columns written by `testbed sweep` (see contracts/run.py)"


def _check_version(version: int, path: Path) -> None:
    if version > FORMAT_VERSION:
        raise UserError(
            f"{path} is format version {version}; this testbed reads versions 1 to {FORMAT_VERSION}",
            "analyse it with the newer testbed that wrote it",
        )


# ====================================================================== trials.csv
@dataclass(frozen=True)
class TrialRecord:
    """One trial, as the client's worker reports it and as its row in trials.csv holds it."""

    op: str
    size: int | float
    method: str  # a codec, a transport (grpc), or LOCAL
    ok: bool
    run_id: str = ""
    trial: int | None = None
    dtype: str = ""
    rate_mbps: float | None = None  # None for a local trial
    rep: int | None = None
    error: str | None = None
    t_total: float | None = None
    t_client_encode: float | None = None
    t_comm: float | None = None
    t_server_decode: float | None = None
    t_server_compute: float | None = None
    t_server_encode: float | None = None
    t_client_decode: float | None = None
    t_request: float | None = None
    bytes_up: int | None = None
    bytes_down: int | None = None
    started_at: str | None = None
    # device emulation: what was measured on the client before scaling (wall and CPU seconds of the
    # client's stages; of the whole operation for local rows), and whether its calibration missed
    wall_client_encode: float | None = None
    cpu_client_encode: float | None = None
    wall_client_decode: float | None = None
    cpu_client_decode: float | None = None
    wall_total: float | None = None
    cpu_total: float | None = None
    emulation_flagged: bool = False
    # a server device: what the server measured in its stages (CPU seconds always, as it reported
    # them; wall seconds when its stages were scaled: then the t_server_* columns are the device's)
    wall_server_decode: float | None = None
    cpu_server_decode: float | None = None
    wall_server_compute: float | None = None
    cpu_server_compute: float | None = None
    wall_server_encode: float | None = None
    cpu_server_encode: float | None = None
    replica: int | None = None  # which of the sweep's testbeds ran it (None: the sweep had one)
    # the testbed broke during the trial's first attempt and was repaired (the manifest's `repairs` say
    # how): what was repaired and why the first attempt failed; this row is the attempt that followed
    repair: str | None = None
    connection: str | None = None  # a remote trial's connection policy (contracts.trials.CONNECTIONS)
    # the cgi stack's process start-up, inside t_request and counted in t_comm (the paper's
    # definition); empty on the wsgi stack, for gRPC and in runs of formats 1 to 3; and its CPU
    # seconds as the server reported them (what a server device would scale)
    t_server_start: float | None = None
    cpu_server_start: float | None = None
    wall_server_start: float | None = None  # a server device's start-up replaced it: what was measured
    server: str | None = None  # the server's language (GRPC_SERVERS); None: local, or before format 5
    t_server_queue: float | None = None  # the wait for a server work slot (SERVER_QUEUE); None: before 6
    client: int | None = None  # several clients: which one ran it, 1..N (None: the sweep had one)
    clients: int | None = None  # several clients: how many offloaded the cell at once (None: one)
    parallelism: int | None = None  # connections the request and reply were split over (None: one)
    io_kb: int | None = None  # the client's write size, KiB (None: the whole body at once)
    concurrency: int | None = None  # requests its client had outstanding at once (None: not varied)
    stream: int | None = None  # which of them ran it, 1..concurrency
    device: str | None = None  # clients of several devices: the one it ran as (None: one device or none)

    def __post_init__(self) -> None:
        """What every row must hold, checked where a record is made: by the sweep from the worker's
        answer (a violation is a bug there) and by the reader from a file (which names the line)."""
        for name in ("op", "method"):
            if not getattr(self, name):
                raise ValueError(f"{name} is empty")
        if self.method != LOCAL and (self.rate_mbps is None or self.rate_mbps <= 0):
            rate = "empty" if self.rate_mbps is None else repr(self.rate_mbps)
            raise ValueError(f"rate_mbps is {rate}; a remote trial needs a positive rate in Mbit/s")
        if self.ok and self.t_total is None:
            raise ValueError("t_total is empty in a successful trial (ok=true)")
        if self.ok and self.t_total < 0:
            raise ValueError(f"t_total is {self.t_total!r}, a negative completion time")


COLUMNS = tuple(f.name for f in fields(TrialRecord))
# how each column is read back (everything else is text)
_INTS = ("trial", "rep", "bytes_up", "bytes_down", "replica", "client", "clients", "parallelism", "io_kb")
_INTS += ("concurrency", "stream")
_BOOLS = ("ok", "emulation_flagged")
_TIMES = ("t_total", *STAGES, "t_request", "t_server_start", "t_server_queue")
_FLOATS = (*_TIMES, "wall_client_encode", "cpu_client_encode", "wall_client_decode")
_FLOATS += ("cpu_client_decode", "wall_total", "cpu_total")
_FLOATS += tuple(f"{m}_server_{s}" for s in ("decode", "compute", "encode") for m in ("wall", "cpu"))
_FLOATS += ("cpu_server_start", "wall_server_start")
REQUIRED = ("op", "size", "rate_mbps", "method", "ok", "t_total", *STAGES)
_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n"}


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


class RowWriter:
    """Appends one row at a time to a versioned CSV and flushes it, so a crash loses at most the row in
    flight (the trials of a sweep, the tasks of a stream).

    A row is either wholly in the file or not at all: each is one unbuffered write, and a write that
    fails part-way (a full file system: ENOSPC) is cut back to where the row began before the error
    goes up, so the rows before it stay readable and `--resume` reruns just that trial.
    """

    def __init__(self, path: Path, mark: str, columns: tuple[str, ...]) -> None:
        self.path, self.columns = path, columns
        new = not path.exists() or path.stat().st_size == 0
        # unbuffered: a failed write leaves nothing in a buffer for a later flush or close to retry
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - held open for the whole sweep
        self._buf = io.StringIO()
        self._csv = csv.writer(self._buf)
        if new:
            self._buf.write(f"{mark}\n")
            self._csv.writerow(columns)
            self._flush()

    def _flush(self) -> None:
        data = memoryview(self._buf.getvalue().encode())
        self._buf.seek(0)
        self._buf.truncate()
        start = os.lseek(self._file.fileno(), 0, os.SEEK_END)
        try:
            while data:  # a write to a nearly full file system can be short before it fails
                data = data[self._file.write(data) :]
        except OSError:
            os.ftruncate(self._file.fileno(), start)  # frees, so it works on a full file system
            raise

    def write(self, record) -> None:
        """One record (a dataclass with the file's columns as fields)."""
        self._csv.writerow([_cell(getattr(record, c)) for c in self.columns])
        self._flush()

    def sync(self) -> None:
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            try:
                os.fsync(self._file.fileno())
            finally:
                self._file.close()


class TrialWriter(RowWriter):
    """trials.csv, appended trial by trial; a resumed run's file is first repaired and upgraded."""

    def __init__(self, path: Path) -> None:
        repair(path)
        if path.exists() and path.stat().st_size > 0:
            _upgrade(path)  # a resumed run of an older version: its rows in this version's columns
        super().__init__(path, f"{TRIALS_MARK}{FORMAT_VERSION}", COLUMNS)


def _upgrade(path: Path) -> None:
    """Rewrite an older trials.csv as this version's (atomically), so appended rows match its header.

    Only a file the sweep wrote can be continued: columns it never writes are refused, not dropped.
    """
    trials = read_trials(path)
    with open(path, newline="", encoding="utf-8-sig") as f:
        header = next(csv.reader(line for line in f if not line.startswith(TRIALS_MARK)), [])
    unknown = [c.strip() for c in header if c.strip() not in COLUMNS]
    if unknown:
        raise UserError(
            f"{path} has column(s) {', '.join(unknown)} the sweep does not write",
            "resume only runs written by testbed sweep",
        )
    if trials.version == FORMAT_VERSION and [c.strip() for c in header] == list(COLUMNS):
        return
    tmp = path.with_suffix(".csv.tmp")
    writer = TrialWriter(tmp)
    for record in trials.records:
        writer.write(record)
    writer.close()
    os.replace(tmp, path)


def repair(path: Path) -> None:
    """Drop a last line cut short by a crash mid-write, so the file stays valid CSV (the sweep's own
    file, before it appends; readers skip such a line instead of changing the file)."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


@dataclass(frozen=True)
class Trials:
    """trials.csv as read: its version, its rows, and the line each row came from."""

    path: Path
    version: int
    records: list[TrialRecord]
    lines: list[int]

    def outcomes(self) -> dict[int, float | None]:
        """Each trial with a row: its t_total, or None if it failed (what resume and the rule see)."""
        return {r.trial: r.t_total if r.ok else None for r in self.records if r.trial is not None}


def read_trials(path: Path) -> Trials:
    """The one reader of trials.csv (or of a shipped run's gzip-packed `trials.csv.gz`): every value
    checked once, a bad one named with its line."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8-sig") as packed:
                text = packed.read()
        else:
            text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UserError(
            f"{path} does not exist", "pass the directory of a run made by `testbed sweep`"
        ) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError: first
        raise UserError(f"{path}: not a whole gzip file ({exc})", "pack it again with gzip") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}", "check the file's permissions") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not readable as text ({exc.reason})", _FIX_FORMAT) from None
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # a row cut short by a crash: the trial in flight
    version, first = 1, 1
    if text.startswith(TRIALS_MARK):
        mark, _, text = text.partition("\n")
        try:
            version = int(mark[len(TRIALS_MARK) :])
        except ValueError:
            raise UserError(f"{path} line 1: {mark!r} is not a format version", _FIX_FORMAT) from None
        _check_version(version, path)
        first = 2
    reader = csv.reader(io.StringIO(text))
    try:
        records, lines = _read_rows(reader, path, first, version)
    except csv.Error as exc:
        raise UserError(
            f"{path} line {reader.line_num + first}: not readable as CSV ({exc})", _FIX_FORMAT
        ) from None
    return Trials(path, version, records, lines)


def _read_rows(reader, path: Path, first: int, version: int) -> tuple[list[TrialRecord], list[int]]:
    header = next(reader, None)
    if header is None:
        raise UserError(f"{path} is empty", "run the sweep first, or pass the directory of a finished run")
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UserError(f"{path} lacks column(s) {', '.join(missing)}", _FIX_FORMAT)
    unknown = [c for c in header if c not in COLUMNS]
    if unknown and version >= 2:  # version 1 files were also written by hand: extra columns are notes
        raise UserError(
            f"{path} has column(s) {', '.join(unknown)} that format {version} does not have", _FIX_FORMAT
        )
    index = {name: header.index(name) for name in COLUMNS if name in header}
    records, lines = [], []
    for fields_ in reader:
        if not any(x.strip() for x in fields_):
            continue  # blank line
        line = reader.line_num + first - 1
        raw = {name: (fields_[i].strip() if i < len(fields_) else "") for name, i in index.items()}
        records.append(_parse_row(raw, path, line))
        lines.append(line)
    return records, lines


def _parse_row(raw: dict[str, str], path: Path, line: int) -> TrialRecord:
    def bad(column: str, why: str) -> UserError:
        return UserError(f"{path} line {line}: {column} {why}", _FIX_FORMAT)

    values: dict[str, Any] = {}
    ok = raw["ok"].lower()
    for column, text in raw.items():
        if column in _TIMES and ok in _FALSE:
            values[column] = None  # a failed trial's times mean nothing, whatever they hold
        elif column in _BOOLS:
            if text.lower() not in _TRUE | _FALSE and (column == "ok" or text):
                raise bad(column, f"is {text!r}, expected true or false")
            values[column] = text.lower() in _TRUE
        elif column in _INTS or column in _FLOATS or column in ("size", "rate_mbps"):
            number = _number(text)
            if text and number is None:
                raise bad(
                    column, f"is {text!r}, not " + ("a time in seconds" if column in _TIMES else "a number")
                )
            values[column] = int(number) if number is not None and column in _INTS else number
        else:
            values[column] = text or None
    if values.get("size") is None:
        raise bad("size", "is empty")
    size = values["size"]
    values["size"] = int(size) if float(size).is_integer() else size
    values["run_id"] = values.get("run_id") or ""
    values["dtype"] = values.get("dtype") or ""
    if (values.get("method") or "").lower() == LOCAL:
        values["method"], values["rate_mbps"] = LOCAL, None  # the baseline does not use the network
    try:
        return TrialRecord(**values)
    except ValueError as exc:  # the record's own checks, the same for the sweep and every reader
        raise UserError(f"{path} line {line}: {exc}", _FIX_FORMAT) from None


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# ====================================================================== manifest.json
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

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Experiment:
        data = dict(data)
        cpu = data.pop("client_cpu", None)
        val = data.pop("validation", None) or {}
        return cls(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()},
            client_cpu=CpuProfile(**cpu) if cpu else None,
            validation=Validation(**val),
        )

    @property
    def adaptive(self) -> bool:
        return self.min_reps is not None

    def transfer_settings(self) -> list[tuple[int | None, int | None]]:
        """The transfer settings it varies, (parallelism, io_kb) each: every combination, or (None,
        None) once when it varies none."""
        return [(p, io) for p in self.parallelism or (None,) for io in self.io_kb or (None,)]

    def offload_labels(self) -> list[str]:
        """Its ways to offload as the analysis names them (`contracts.trials.offload_label`): each
        method and server, with each transfer setting and each number of clients at once it varies."""
        return [
            offload_label(method, server, k, p, io, c)
            for method, server in offloads(self.methods, self.servers)
            if method != LOCAL
            for p, io in self.transfer_settings()
            for c in self.concurrency or (None,)
            for k in self.contention or (None,)
        ]

    @property
    def together(self) -> bool:
        """Several requests in flight at once (several clients, or a client's concurrency): the
        server's work slots and pacing, and the cells run by one worker per request stream."""
        return self.clients > 1 or max(self.concurrency, default=1) > 1

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


@dataclass(slots=True)
class LinkCheck:
    """One iperf3 check of one direction of a rate's link (or a rate whose validation was skipped)."""

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
        _check_version(version, path)
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
