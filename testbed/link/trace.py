"""Link trace files, read into the `ReplayPlan` the appliance's agent replays.

Two formats, told apart by their first data line (a comma: CSV):

- **CSV** `t_s,up_mbps,down_mbps[,delay_ms,loss_pct]` (a header line starting with `t_s`, blank
  lines and `#` comments allowed). Each row holds from its `t_s` until the next row's; the last
  row's `t_s` is the trace's end (its other values are not used). Delay and loss need netem on the
  appliance; a trace that asks for them is refused there in one line where the kernel has none.
- **Mahimahi** packet-delivery traces (`mm-link`'s format): one line per 1500-byte delivery
  opportunity, its time in ms; the trace repeats after its last timestamp (which is thus the next
  pass's time 0, as `mm-link` plays it). Read at a granularity
  (the width of an interval, in ms): each interval's rate is its opportunities x 1500 bytes over its
  width (the last interval over its own, shorter, width). One file shapes both directions unless a
  second one is given for the down direction (server -> client).

A bad file is refused in one line naming the file, the line and the reason.
"""

from __future__ import annotations

import math
from pathlib import Path

from contracts.errors import UserError
from contracts.trace import ReplayPlan, TraceStep

MAHIMAHI_BYTES = 1500  # what one delivery opportunity carries (mahimahi's MTU-sized packet)
DEFAULT_GRANULARITY_MS = 100


def _bad(path: Path, line: int, reason: str) -> UserError:
    return UserError(f"{path}:{line}: {reason}", "correct that line (the formats: `testbed shape --help`)")


def _data_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of each line that is neither blank nor a comment."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read trace {path}: {exc.strerror}", "give an existing trace file") from None
    except UnicodeDecodeError:
        raise UserError(f"trace {path} is not text", "give a CSV or Mahimahi trace file") from None
    lines = [(n, raw.strip()) for n, raw in enumerate(text.splitlines(), start=1)]
    return [(n, line) for n, line in lines if line and not line.startswith("#")]


def _number(path: Path, line: int, name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _bad(path, line, f"{name} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise _bad(path, line, f"{name} {text} is not a finite number >= 0")
    return value


def read_csv(path: Path) -> ReplayPlan:
    """A CSV trace (see the module's docstring)."""
    rows = _data_lines(path)
    if rows and rows[0][1].replace(" ", "").lower().startswith("t_s,"):
        rows = rows[1:]
    if len(rows) < 2:
        raise _bad(path, rows[0][0] if rows else 1, "a trace needs at least two rows (the last is its end)")
    steps: list[TraceStep] = []
    previous = None
    for line, text in rows:
        fields = [f.strip() for f in text.split(",")]
        if not 3 <= len(fields) <= 5:
            raise _bad(path, line, f"{len(fields)} fields; want t_s,up_mbps,down_mbps[,delay_ms,loss_pct]")
        t, up, down = (
            _number(path, line, n, f) for n, f in zip(("t_s", "up_mbps", "down_mbps"), fields, strict=False)
        )
        extra = [
            _number(path, line, n, f) if f else None
            for n, f in zip(("delay_ms", "loss_pct"), fields[3:], strict=False)
        ]
        delay, loss = (extra + [None, None])[:2]
        if loss is not None and loss > 100:
            raise _bad(path, line, f"loss_pct {loss:g} is over 100")
        if previous is None and t != 0:
            raise _bad(path, line, f"the first row's t_s is {t:g}; a trace starts at 0")
        if previous is not None and t <= previous:
            raise _bad(path, line, f"t_s {t:g} does not follow the previous row's {previous:g}")
        previous = t
        steps.append(TraceStep(t, round(up * 1e6), round(down * 1e6), delay, loss))
    return ReplayPlan(tuple(steps[:-1]), steps[-1].t_s, str(path))


def read_mahimahi_rates(path: Path, granularity_ms: int) -> tuple[list[int], float]:
    """Rates (bits/s) per interval of `granularity_ms`, and the trace's length in seconds."""
    stamps: list[int] = []
    for line, text in _data_lines(path):
        try:
            stamp = int(text)
        except ValueError:
            raise _bad(path, line, f"{text!r} is not a whole number of milliseconds") from None
        if stamp < 0:
            raise _bad(path, line, f"timestamp {stamp} is negative")
        if stamps and stamp < stamps[-1]:
            raise _bad(path, line, f"timestamp {stamp} goes back in time (after {stamps[-1]})")
        stamps.append(stamp)
    if not stamps or stamps[-1] == 0:
        raise _bad(path, len(stamps) or 1, "a Mahimahi trace needs a last timestamp after 0 ms (its length)")
    length = stamps[-1]
    n = math.ceil(length / granularity_ms)
    counts = [0] * n
    for stamp in stamps:
        # the trace repeats every `length` ms, so its last opportunity is the next pass's time 0
        counts[(stamp % length) // granularity_ms] += 1
    widths = [granularity_ms] * (n - 1) + [length - (n - 1) * granularity_ms]
    rates = [round(c * MAHIMAHI_BYTES * 8 * 1000 / w) for c, w in zip(counts, widths, strict=True)]
    return rates, length / 1000


def read_mahimahi(
    up: Path, down: Path | None = None, granularity_ms: int = DEFAULT_GRANULARITY_MS
) -> ReplayPlan:
    """Mahimahi traces: `up` for client -> server, `down` (default: the same file) for server -> client."""
    if granularity_ms < 1:
        raise UserError(f"granularity {granularity_ms} ms is not a positive number of ms", "e.g. 100")
    up_rates, up_len = read_mahimahi_rates(up, granularity_ms)
    down_rates, down_len = (up_rates, up_len) if down is None else read_mahimahi_rates(down, granularity_ms)
    if down is not None and len(down_rates) != len(up_rates):
        raise UserError(
            f"Mahimahi traces {up} ({up_len:g} s) and {down} ({down_len:g} s) differ in length at "
            f"{granularity_ms} ms intervals",
            "give two traces of the same length",
        )
    end = max(up_len, down_len)
    g = granularity_ms / 1000
    steps = tuple(
        TraceStep(round(i * g, 6), u, d) for i, (u, d) in enumerate(zip(up_rates, down_rates, strict=True))
    )
    source = str(up) if down is None else f"{up} (up), {down} (down)"
    return ReplayPlan(steps, end, source)


def is_csv(path: Path) -> bool:
    """Whether the file reads as a CSV trace (its first data line has a comma) rather than Mahimahi."""
    lines = _data_lines(path)
    return bool(lines) and "," in lines[0][1]


def load_trace(
    path: Path, down: Path | None = None, granularity_ms: int = DEFAULT_GRANULARITY_MS
) -> ReplayPlan:
    """A trace file of either format (`down`: a second Mahimahi file for server -> client)."""
    if is_csv(path):
        if down is not None:
            raise UserError(f"{path} is a CSV trace: it holds both directions", "drop --down-trace")
        return read_csv(path)
    return read_mahimahi(path, down, granularity_ms)


def write_csv(plan: ReplayPlan, path: Path, comment: str = "") -> None:
    """A plan as a CSV trace (what `scripts/make_traces.py` ships): the end as a last row."""
    netem = plan.needs_netem
    header = "t_s,up_mbps,down_mbps" + (",delay_ms,loss_pct" if netem else "")
    lines = [f"# {line}" for line in comment.splitlines()] + [header]

    def row(t: float, up: int, down: int, delay, loss) -> str:
        cells = [f"{t:g}", f"{up / 1e6:g}", f"{down / 1e6:g}"]
        if netem:
            cells += [f"{delay or 0:g}", f"{loss or 0:g}"]
        return ",".join(cells)

    lines += [row(s.t_s, s.up_bps, s.down_bps, s.delay_ms, s.loss_pct) for s in plan.steps]
    last = plan.steps[-1]
    lines.append(row(plan.end_s, last.up_bps, last.down_bps, last.delay_ms, last.loss_pct))
    path.write_text("\n".join(lines) + "\n")
