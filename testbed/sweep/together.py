"""Several clients offloading one cell at once (`clients` > 1, or concurrency): each client's (and
request stream's) trials in a thread of its own, open or closed loop, the shaping and the switch
checked after each trial."""

from __future__ import annotations

import logging
import random
import threading
import time

from contracts.grid import LinkPoint
from testbed.experiment import Experiment
from testbed.link.repairs import heal, repair_shaping, shaping_guard
from testbed.sweep.plan import Trial
from testbed.sweep.testbeds import Testbed
from testbed.sweep.trials import TrialCheck, cell_label, run_threads

log = logging.getLogger("testbed.sweep")


class Together:
    """The sweep's way of running a cell with several clients at once (`Sweep` is one): its
    methods use the sweep's testbeds, source, writer and progress."""

    def run_together(self, tb: Testbed, point: LinkPoint, group: list[Trial]) -> None:
        """Several clients: each cell's trials with the clients that offload it at once, cell after
        cell (`run_cell_together`). A cell whose shaping or switch broke has the testbed healed and
        its trials that did not run run then."""
        lab, exp = tb.lab, self.exp
        rate = point.rate_mbps
        cells: dict[tuple, list[Trial]] = {}
        for t in group:
            cells.setdefault(t.cell, []).append(t)
        for trials in cells.values():
            for _attempt in (1, 2):
                if self.source.stopped or tb.problems.get(point):
                    return
                trials, (wrong, switch) = self.run_cell_together(tb, rate, trials)
                if not (wrong or switch) or not trials:
                    break
                if switch:
                    why = f"the switch broke while {cell_label(trials[0])} ran: {'; '.join(switch)}"
                    ids = [t.trial for t in trials]
                    tb.problems[point] = heal(
                        lab, exp, rate, self.manifest, why, ids, grpc=False, switch=switch
                    ).link
                else:
                    tb.problems[point] = repair_shaping(lab, exp, rate, self.manifest, wrong, trials[0].trial)
            self.close_cells()
        with self.lock:
            self.writer.sync()

    def run_cell_together(
        self, tb: Testbed, rate: float, trials: list[Trial]
    ) -> tuple[list[Trial], tuple[str, list[str]]]:
        """One cell with the clients that offload it at once: they start together and each runs its
        repetitions back to back (closed loop: its next trial when its last one ends), each on its
        own host with its own worker; a row is written as each trial ends. Each trial is checked as a
        trial alone is (`TrialCheck`, one for the cell): its switch watched while it runs, then every
        port still shaped at the rate, and the byte counters, since the cell began, at least the
        payloads of the trials that ended (the clients' transfers overlap, so no one trial's bytes
        can be told apart). Returns the trials that did not run, and what was wrong with the shaping
        and with the switch (empty: nothing)."""
        lab, exp = tb.lab, self.exp
        by_stream: dict[tuple[int, int], list[Trial]] = {}  # (client, request stream): its trials
        for t in sorted(trials, key=lambda t: (t.client or 1, t.stream or 1, t.rep)):
            by_stream.setdefault((t.client or 1, t.stream or 1), []).append(t)
        check = TrialCheck(lab, exp, self.run_dir, shaping_guard(lab, rate, since_start=True))
        ran: set[int] = set()
        broken: list[tuple[str, list[str]]] = []  # (shaping, switch)
        errors: list[BaseException] = []

        def client(stream: tuple[int, int], mine: list[Trial]) -> None:
            k, s = stream
            role = lab.client_roles[k - 1]
            name = role if s == 1 else f"{role}-{s}"  # a further request stream: a worker of its own
            arrivals = Arrivals(exp, trials[0].cell, k)
            try:
                worker = self.stream_worker(tb, role, name, mine)
                arrivals.start()
                for t in mine:
                    arrivals.wait()  # open loop: until this trial's arrival (closed: at once)
                    if self.source.stopped or broken:
                        break
                    self.show(cell_label(t))
                    with tb.quiet.shared():
                        done = check.run(worker, t)
                    worker = done.worker
                    if done.wrong or done.switch:
                        broken.append((done.wrong, done.switch))
                    ran.add(t.trial)
                    self.record(tb, t, done.result, emulation_flagged=self.flagged(tb, t, done.result))
                    self.keep_worker(tb, name, worker)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the testbed's own thread
                errors.append(exc)
                self.source.stop()

        def stop() -> None:
            self.source.stop()
            for worker in [tb.worker, *tb.workers.values()]:  # a trial in flight ends with its worker
                if worker is not None:
                    worker.proc.kill()

        run_threads([threading.Thread(target=client, args=kv, daemon=True) for kv in by_stream.items()], stop)
        if errors:
            raise errors[0]
        return [t for t in trials if t.trial not in ran], (broken[0] if broken else ("", []))


class Arrivals:
    """When a client's trials of a cell start: closed loop, each when the last one ends; open loop
    (`arrivals_hz`), at the arrivals of a Poisson process seeded by the experiment, the cell and the
    client, or when the last one ends if that is later (one request in flight per client)."""

    def __init__(self, exp: Experiment, cell: tuple, client: int) -> None:
        self.rate = exp.arrivals_hz
        self.rng = random.Random(f"{exp.seed}-{cell}-{client}")
        self.next = 0.0

    def start(self) -> None:
        if self.rate:
            self.next = time.monotonic() + self.rng.expovariate(self.rate)

    def wait(self) -> None:
        if not self.rate:
            return
        time.sleep(max(0.0, self.next - time.monotonic()))
        self.next += self.rng.expovariate(self.rate)
