"""A stream run's `tasks.csv`: one row per task of a task stream run against a replayed link trace,
under one decision policy. The typed, versioned contract between `testbed stream` and the analysis
(`analysis.online`), written row by row as `trials.csv` is (`contracts.row_file.RowWriter`).

Times on one axis, the trace's (`trace_t`: seconds from the replay's start instant): a task arrives
at `arrival_s`, starts when the device is free (`start_s`, at or after its arrival) and ends at
`end_s` = `start_s` + `t_total`, the device's completion time of the trial it ran (its stages as the
sweep's trials have them). `trace_up_mbps` and `trace_down_mbps` are the trace's rates at its start;
an online policy's bandwidth estimate and its predictions at the decision are kept beside them.
An online policy whose estimate is stale measures the link before it decides (`probe`): a small
offload of its own, whose device time `probe_s` comes first, so such a task ends at `start_s` +
`probe_s` + `t_total`.

Versions, marked on the file's first line as trials.csv's are: 1, the first; 2 adds `probe_s` (a
probe was a task offloaded blind before: version 1's rows read with `probe_s` empty).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from contracts.errors import UserError
from contracts.row_file import FALSE_WORDS, TRUE_WORDS, RowWriter, repair
from contracts.stage_times import StageTimes
from contracts.stages import LOCAL

TASKS_FILE = "tasks.csv"
STREAM_FILE = (
    "stream.json"  # the stream run's spec, trace plan, tasks and replays (testbed.online.task_stream)
)
TASKS_MARK = "# offload-testbed tasks format "
TASKS_VERSION = 2
DECISIONS = ("local", "remote")
_FIX = "tasks.csv needs the columns written by `testbed stream` (see contracts/tasks.py)"


@dataclass(frozen=True)
class _TaskHead:
    """A task's columns before its stage times (`StageTimes`): which task, when, and what was decided."""

    policy: str  # local, remote-METHOD, online-METHOD
    task: int
    op: str
    size: int
    arrival_s: float
    start_s: float
    decision: str  # local or remote
    method: str  # what ran: LOCAL or the codec
    ok: bool
    end_s: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class TaskRecord(StageTimes, _TaskHead):
    """One task of a stream under one policy, as its row in tasks.csv holds it: the columns of
    `_TaskHead`, then the stage times (the trial it ran, as trials.csv has them), then these."""

    bytes_up: int | None = None
    bytes_down: int | None = None
    trace_up_mbps: float | None = None  # the trace's rates in force at the task's start
    trace_down_mbps: float | None = None
    estimate_mbps: float | None = None  # an online policy's bandwidth estimate when it decided
    predicted_local_s: float | None = None  # and its predictions of the two completion times
    predicted_remote_s: float | None = None
    probe: bool = False  # an online policy measured the link before deciding (its estimate was stale)
    probe_s: float | None = None  # the device's seconds on that probe, before the task's trial
    lag_s: float | None = None  # scaled mode: the device's encode minus the host's (the transfer came early)

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"decision is {self.decision!r}, not one of {', '.join(DECISIONS)}")
        if (self.decision == "local") != (self.method == LOCAL):
            raise ValueError(f"decision {self.decision} ran method {self.method}")
        if self.start_s < self.arrival_s:
            raise ValueError(f"start_s {self.start_s!r} is before arrival_s {self.arrival_s!r}")
        if self.ok and (self.t_total is None or self.t_total < 0):
            raise ValueError("t_total is empty or negative in a successful task (ok=true)")


TASK_COLUMNS = tuple(f.name for f in fields(TaskRecord))
COLUMNS_OF = {1: tuple(c for c in TASK_COLUMNS if c != "probe_s"), 2: TASK_COLUMNS}
_KINDS = {f.name: f.type for f in fields(TaskRecord)}  # "str", "int", "float | None"... (postponed)


class TaskWriter(RowWriter):
    """tasks.csv, appended task by task."""

    def __init__(self, path: Path) -> None:
        repair(path)
        super().__init__(path, f"{TASKS_MARK}{TASKS_VERSION}", TASK_COLUMNS)


def read_tasks(path: Path) -> list[TaskRecord]:
    """The one reader of tasks.csv: every value checked once, a bad one named with its line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(
            f"{path} does not exist", "pass the directory of a run made by `testbed stream`"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}", _FIX) from None
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # a row cut short by a crash: the task in flight
    mark, _, text = text.partition("\n")
    if not mark.startswith(TASKS_MARK):
        raise UserError(f"{path} line 1: not a tasks file (no {TASKS_MARK.strip()!r} line)", _FIX)
    version = mark[len(TASKS_MARK) :]
    columns = COLUMNS_OF.get(int(version) if version.isdigit() else -1)
    if columns is None:
        raise UserError(
            f"{path} is tasks format {version}; this tool reads formats {', '.join(map(str, COLUMNS_OF))}",
            "use the version of the tool that wrote it",
        )
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    if header != list(columns):
        raise UserError(f"{path} line 2: its columns are not format {version}'s", _FIX)
    records = []
    for cells in reader:
        if not any(c.strip() for c in cells):
            continue
        line = reader.line_num + 1
        if len(cells) != len(header):
            raise UserError(f"{path} line {line}: {len(cells)} fields, not {len(header)}", _FIX)
        values = {
            name: _value(name, text.strip(), path, line) for name, text in zip(header, cells, strict=True)
        }
        try:
            records.append(TaskRecord(**values))
        except ValueError as exc:
            raise UserError(f"{path} line {line}: {exc}", _FIX) from None
    return records


def _value(name: str, text: str, path: Path, line: int) -> Any:
    kind = _KINDS[name]
    if not text:
        if "None" not in kind:
            raise UserError(f"{path} line {line}: {name} is empty", _FIX)
        return None
    if kind.startswith("bool"):
        if text.lower() not in TRUE_WORDS | FALSE_WORDS:
            raise UserError(f"{path} line {line}: {name} is {text!r}, expected true or false", _FIX)
        return text.lower() in TRUE_WORDS
    if kind.startswith(("int", "float")):
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise UserError(f"{path} line {line}: {name} is {text!r}, not a number", _FIX)
        return int(number) if kind.startswith("int") else number
    return text
