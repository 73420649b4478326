"""Every shaped trial checked against what it ran through, before its row is kept.

A rate group's link is validated once (iperf3), but the shaping can go away while its trials run (a
qdisc deleted, the class replaced, the switch restarted without it): trials would then be kept as
run "at 20 Mbit/s" over an unshaped link, silently wrong in exactly the data the tool exists to
produce. So after each trial the appliance's HTB classes are read back (one agent verb): each port
must still have our class, at the rate asked, and its byte counter must have advanced by at least
the payload the trial moved that way (`ShapingGuard`). A trial that fails the check is written as
failed, with what was measured, and the sweep repairs the shaping (`testbed.link.repairs`).

The switch can die under a trial too, and the trial then waits for its timeout (the switch forwards
nothing): so while a trial runs its switch's daemons are asked after every few seconds
(`SwitchWatch`), and a dead switch ends the trial at once, so the repair starts seconds after the
switch died, not after the trial's timeout.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from contracts.agent_answers import HtbClass
from contracts.units import format_rate
from contracts.worker_api import TrialResult

RATE_TOLERANCE = 0.01  # the kernel keeps rates in bytes/s: a rate asked in bits/s rounds
WATCH_EVERY_S = 2.0  # how often a trial's switch is asked after: the first time this long into the trial
PAYLOADS = ("bytes_up", "bytes_down")

log = logging.getLogger("testbed.sweep")
# the watches' threads, kept between trials: starting a thread waits until the new thread has run,
# which on a busy machine costs a trial milliseconds (measured: a median 1.5 ms more per trial)
_WATCHING = ThreadPoolExecutor(max_workers=64, thread_name_prefix="switch watch")


class ShapingGuard:
    """The shaping of one rate group: `check` compares the classes now with the last reading.

    `since_start` (several clients offloading at once): their transfers overlap, so no one trial's
    bytes can be told apart; each reading is compared with the first one instead, against the
    payloads of every trial checked since."""

    def __init__(
        self, rate_bps: int, up_if: str, down_if: str, classes: dict[str, HtbClass], since_start: bool = False
    ) -> None:
        self.rate_bps = rate_bps
        self.ports = (("up", up_if, "bytes_up"), ("down", down_if, "bytes_down"))
        self.last = classes
        self.since_start = since_start
        self.moved = dict.fromkeys(PAYLOADS, 0)  # since_start: the payloads of the trials checked so far

    def check(self, classes: dict[str, HtbClass], result: TrialResult) -> str | None:
        """What was wrong with the shaping while the trial of `result` ran, or None; `classes` becomes
        the reading the next trial is checked against (since_start: the first reading stays that)."""
        moved = {key: getattr(result, key) for key in PAYLOADS}
        if self.since_start:
            for key in PAYLOADS:
                self.moved[key] += moved[key] or 0
            moved = self.moved
        problems = []
        for direction, port, payload_key in self.ports:
            before, now = self.last.get(port), classes.get(port)
            if now is None:
                problems.append(f"{port} ({direction}) has no HTB class 1:10: the link was not shaped")
                continue
            if abs(now.rate - self.rate_bps) > RATE_TOLERANCE * self.rate_bps:
                problems.append(
                    f"{port} ({direction}) is shaped at {format_rate(now.rate)}, not {format_rate(self.rate_bps)}"
                )
            if before is None:
                continue  # the class came back since the last reading: its counters say nothing yet
            sent = now.bytes - before.bytes
            payload = moved[payload_key]
            if sent < 0:
                problems.append(
                    f"{port} ({direction}): the class's byte counter went back ({sent} bytes): it was replaced"
                )
            elif payload and sent < payload:
                problems.append(
                    f"{port} ({direction}) sent {sent} bytes through its class while the trial moved "
                    f"{payload} bytes that way: the trial bypassed the shaping"
                )
        if not self.since_start:
            self.last = classes
        return "; ".join(problems) or None


class SwitchWatch:
    """While one trial runs (`with`): `problems()` (what is wrong with the switch; empty: healthy)
    asked every `every_s` s, the first time `every_s` s in, in a thread kept between trials; so a
    trial shorter than that costs a hand-over to that thread and nothing else. A problem found ends
    the trial at once (`end`, which kills its worker: the trial then fails, and its worker is started
    again) and is kept in `found`. Leaving `with` does not wait for the thread: once it has been left
    nothing is ended or found (one lock orders the two), and a question in flight then only delays
    the check after the trial, which asks the same agent.

    `problems` goes through the appliance's agent, one resident process whose link serializes its
    verbs (`AgentLink.ask` holds a lock for a verb's request and answer), so the check after the
    trial waits for a question of the watch's in flight rather than reading its answer. A question
    that fails stops the watch: the check after the trial asks the same agent and reports it."""

    def __init__(
        self, problems: Callable[[], list[str]], end: Callable[[], None], every_s: float | None = None
    ) -> None:
        self.problems, self.end = problems, end
        self.every_s = WATCH_EVERY_S if every_s is None else every_s
        self.found: list[str] = []
        self._over = threading.Event()
        self._lock = threading.Lock()  # the trial's end and the watch's ending of it, one at a time

    def __enter__(self) -> SwitchWatch:
        _WATCHING.submit(self._watch)
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._over.set()

    @property
    def ended(self) -> bool:
        """Whether the watch ended the trial (its worker was killed)."""
        return bool(self.found)

    def _watch(self) -> None:
        while not self._over.wait(self.every_s):
            try:
                found = self.problems()
            except Exception as exc:  # noqa: BLE001 - the check after the trial asks again, and raises
                log.debug("the switch watch stopped: %s", exc)
                return
            if found:
                with self._lock:
                    if not self._over.is_set():
                        log.warning(
                            "the switch died while a trial ran (%s); ending the trial", "; ".join(found)
                        )
                        self.found = found
                        self.end()
                return
