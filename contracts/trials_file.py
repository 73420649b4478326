"""A run's trials.csv: `TrialRecord` (a row), its columns, `TrialWriter` and `read_trials`, the one
reader (resume, the stopping rule and the analysis all read through it).

The file's first line is its format mark (`# offload-testbed trials format 14`; none in version 1),
then a header of the record's fields and a row per trial; the versions are `contracts.run_format`'s.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
import zlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from contracts.errors import UserError
from contracts.grid import UNSHAPED
from contracts.row_file import FALSE_WORDS, TRUE_WORDS, RowWriter, repair
from contracts.run_format import FORMAT_VERSION, check_version
from contracts.stage_times import STAGE_TIMES, StageTimes
from contracts.stages import LOCAL

TRIALS_MARK = "# offload-testbed trials format "
TRIALS_FILE = "trials.csv"
PACKED_TRIALS_FILE = TRIALS_FILE + ".gz"  # a shipped run's trials (`analysis.reproduction`)
_FIX_FORMAT = "trials.csv needs the columns written by `testbed sweep` (see contracts/trials_file.py)"


@dataclass(frozen=True)
class _TrialHead:
    """A trial's columns before its stage times (`StageTimes`): what ran, and whether it worked."""

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


@dataclass(frozen=True)
class TrialRecord(StageTimes, _TrialHead):
    """One trial, as the client's worker reports it and as its row in trials.csv holds it: the columns
    of `_TrialHead`, then the stage times, then these."""

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
    connection: str | None = None  # a remote trial's connection policy (contracts.stages.CONNECTIONS)
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
    # the text its JSON codecs wrote (contracts.stages.CODEC_TEXTS: compact, or the era's of issue 45),
    # the run's setting, in every row; None: a run before format 10, which wrote compact text
    codec_text: str | None = None
    # the link's one-way delay (ms, added in each direction) and loss (% per direction) the trial ran
    # at, where the sweep varies them (`delays:`, `losses:`); None: not varied, or a run before format 11
    delay_ms: float | None = None
    loss_pct: float | None = None
    # a transfer sweep's row (op fetch): the dataset it fetched (`contracts.datasets`); its size is the
    # dataset's number of files, t_total the fetch's seconds, bytes_down its bytes; None before format 12
    dataset: str | None = None
    # an RPC study's row (`contracts.rpc_study`; its op an operation, its method a transport): the
    # calls of its batch (t_total: the batch's seconds), one call's seconds (median, p99), the server's
    # CPU seconds per call (median), and the bytes per call the appliance's ports sent each way while
    # it ran (the batch and its one untimed call; frames, TCP/IP and the connection's own included),
    # where bytes_up/down are one call's messages as its transport frames them. None before format 14
    calls: int | None = None
    t_call_median: float | None = None
    t_call_p99: float | None = None
    cpu_server_call: float | None = None
    wire_up: float | None = None
    wire_down: float | None = None

    def __post_init__(self) -> None:
        """What every row must hold, checked where a record is made: by the sweep from the worker's
        answer (a violation is a bug there) and by the reader from a file (which names the line)."""
        for name in ("op", "method"):
            if not getattr(self, name):
                raise ValueError(f"{name} is empty")
        if self.method != LOCAL and (self.rate_mbps is None or self.rate_mbps <= 0):
            rate = "empty" if self.rate_mbps is None else repr(self.rate_mbps)
            raise ValueError(
                f"rate_mbps is {rate}; a remote trial needs a positive rate in Mbit/s (inf: unshaped)"
            )
        if self.ok and self.t_total is None:
            raise ValueError("t_total is empty in a successful trial (ok=true)")
        if self.ok and self.t_total < 0:
            raise ValueError(f"t_total is {self.t_total!r}, a negative completion time")


COLUMNS = tuple(f.name for f in fields(TrialRecord))
# how each column is read back (everything else is text)
_INTS = ("trial", "rep", "bytes_up", "bytes_down", "replica", "client", "clients", "parallelism", "io_kb")
_INTS += ("concurrency", "stream", "calls")
_BOOLS = ("ok", "emulation_flagged")
_TIMES = (*STAGE_TIMES, "t_request", "t_server_start", "t_server_queue")
_FLOATS = (*_TIMES, "wall_client_encode", "cpu_client_encode", "wall_client_decode")
_FLOATS += ("cpu_client_decode", "wall_total", "cpu_total")
_FLOATS += tuple(f"{m}_server_{s}" for s in ("decode", "compute", "encode") for m in ("wall", "cpu"))
_FLOATS += ("cpu_server_start", "wall_server_start", "delay_ms", "loss_pct")
_FLOATS += ("t_call_median", "t_call_p99", "cpu_server_call", "wire_up", "wire_down")
REQUIRED = ("op", "size", "rate_mbps", "method", "ok", *STAGE_TIMES)


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
        check_version(version, path)
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
        if column in _TIMES and ok in FALSE_WORDS:
            values[column] = None  # a failed trial's times mean nothing, whatever they hold
        elif column in _BOOLS:
            if text.lower() not in TRUE_WORDS | FALSE_WORDS and (column == "ok" or text):
                raise bad(column, f"is {text!r}, expected true or false")
            values[column] = text.lower() in TRUE_WORDS
        elif column == "rate_mbps" and text.strip().lower() == "inf":
            values[column] = UNSHAPED  # an RPC study's unshaped link (format 14)
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
