"""The sweep's progress line on stderr: cells and trials done, a bar, the current trial, an ETA.

On a terminal the line is redrawn in place; otherwise (a log file) it is printed every ten seconds.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass

from testbed.estimate import format_duration
from testbed.sweep.plan import Trial

log = logging.getLogger("testbed.sweep")  # its lines go to the run's sweep.log

PRIOR_S = 60.0  # seconds of trials after which the measured pace counts as much as the model


@dataclass
class Progress:
    total_trials: int
    total_cells: int
    cells_left: dict
    done: int = 0
    started: float = 0.0
    ran: int = 0
    saved: int = 0  # trials an adaptive sweep will not run: its closed cells' remaining repetitions
    seconds: dict | None = None  # cell -> the model's seconds per trial (`testbed.estimate`); None: averages
    min_left: dict | None = None  # adaptive: cell -> trials it runs at the least (its remaining to min)

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self._last = 0.0
        self.modelled = 0.0  # the model's seconds for the trials run so far
        self.detached = False  # its terminal went away: no more lines

    def show(self, label: str, trial: Trial | None = None, final: bool = False) -> None:
        if trial is not None:
            self.count(trial.cell)
        cells_done = sum(1 for v in self.cells_left.values() if v == 0)
        low, high = self.eta()
        eta = ""
        if high is not None:
            eta = f" ETA {format_duration(high)}"
            if low is not None and format_duration(low) != format_duration(high):
                eta = f" ETA {format_duration(low)}..{format_duration(high)}"
        line = (
            f"[cells {cells_done}/{self.total_cells}] trials {self.done}/{self.total_trials} "
            f"{_bar(self.done, self.total_trials)} {label}{eta}"
        )
        now = time.monotonic()
        if self.tty:
            self._write("\r\033[K" + line + ("\n" if final else ""))
        elif final or now - self._last > 10:
            self._write(line + "\n")
            self._last = now

    def count(self, cell) -> None:
        """One more trial of `cell` done (a sweep's cell, or whatever else the caller counts by, such as
        a task stream's policy)."""
        self.done += 1
        self.ran += 1
        if self.cells_left[cell] > 0:
            self.cells_left[cell] -= 1
        else:  # a cell the stopping rule had closed reopened (its baseline grew): one more trial
            self.total_trials += 1
            self.saved = max(0, self.saved - 1)
        if self.seconds is not None:
            self.modelled += self.seconds[cell]
        if self.min_left is not None and self.min_left.get(cell, 0) > 0:
            self.min_left[cell] -= 1

    def _write(self, text: str) -> None:
        """To the terminal, while there is one: a sweep of hours goes on when the terminal or the pipe
        it wrote to goes away (measured: a sweep piped into `tail`, whose `tail` was stopped, died of
        the broken pipe and left its four testbeds up); sweep.log keeps the record."""
        if self.detached:
            return
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (BrokenPipeError, OSError) as exc:
            self.detached = True
            log.warning("the progress line's terminal went away (%s); the sweep goes on", exc)

    def eta(self) -> tuple[float | None, float | None]:
        """Seconds left at the least and at the most (None: unknown). With a model: the model's time for
        the trials left, times what the trials so far took over what the model said they would (both
        plus `PRIOR_S`, so the factor moves from 1 to the measured pace as trials accumulate)."""
        elapsed = time.monotonic() - self.started
        if self.seconds is None:
            if not self.ran:
                return None, None
            per = elapsed / self.ran
            return None, per * (self.total_trials - self.done)
        # what the trials took over what the model said, with the model's own word worth PRIOR_S: a
        # rate's set-up (validation, warm-up) before its first few short trials does not make a spike
        factor = (elapsed + PRIOR_S) / (self.modelled + PRIOR_S) if self.ran else 1.0
        high = factor * sum(left * self.seconds[c] for c, left in self.cells_left.items())
        if self.min_left is None:
            return None, high
        low = sum(min(left, self.min_left.get(c, 0)) * self.seconds[c] for c, left in self.cells_left.items())
        return factor * low, high

    def close_cells(self, still_open) -> None:
        """Every cell not in `still_open` is finished (adaptive: the stopping rule closed it)."""
        still_open = set(still_open)
        for cell, left in self.cells_left.items():
            if left and cell not in still_open:
                self.saved += left
                self.total_trials -= left
                self.cells_left[cell] = 0

    def note(self, text: str) -> None:
        """A line of its own above the progress line (a warning the user must see)."""
        self._write(("\r\033[K" if self.tty else "") + text + "\n")

    def reset_clock(self) -> None:
        """The ETA counts from here (after set-up such as a device calibration)."""
        self.started = time.monotonic()


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"
