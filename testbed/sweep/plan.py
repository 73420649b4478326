"""Which trials a sweep runs, and in what order.

Trial ids number the grid in one fixed order (op, size, rate, delay, loss, method, server, rep; the
delay and the loss only where the sweep varies them; the local baseline
first; with several clients, (..., server, clients at once, rep, client); with concurrency, the
requests outstanding per client before the clients, and each request stream after its client; with
clients of several devices, each local repetition once per device, on that device's first client), so
a resumed sweep knows exactly which trials are missing. Only the method grpc has servers of
its own (`contracts.stages.offloads`): a run with the Python server alone numbers its trials as runs
before servers did. The execution order within each rate group
(local baseline, then each rate) is shuffled from the experiment's seed, so slow drift on the machine
does not line up with any one factor. A group is one point of the link (`LinkPoint`: a rate, with its
delay and loss where the sweep varies them), shaped and validated once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import product

from contracts.grid import LinkPoint
from contracts.stages import LOCAL, offloads
from testbed.devices import load_device
from testbed.experiment import Experiment


@dataclass(frozen=True)
class Trial:
    trial: int
    op: str
    size: int
    dtype: str
    rate_mbps: float | None  # None for the local baseline
    method: str  # a codec, or "local"
    rep: int
    server: str = ""  # the server's language (contracts.stages.GRPC_SERVERS); "" for the local baseline
    clients: int | None = None  # several clients: how many offload the cell at once (None: one client)
    client: int | None = None  # several clients: which of them runs this trial, 1..clients
    parallelism: int | None = None  # transfer settings a sweep varies (None: not varied)
    io_kb: int | None = None
    concurrency: int | None = None  # requests its client has outstanding at once (None: not varied)
    stream: int | None = None  # which of them runs this trial, 1..concurrency
    device: str | None = None  # clients of several devices: the one it runs as (its client's)
    dataset: str | None = None  # a transfer sweep's (op fetch): the dataset its size names
    delay_ms: float | None = None  # one-way, added both ways, where the sweep varies it (None: not varied)
    loss_pct: float | None = None  # % per direction, where the sweep varies it (None: not varied)

    @property
    def link(self) -> LinkPoint | None:
        """The point of the link it runs at (its group's); None for the local baseline."""
        return None if self.rate_mbps is None else LinkPoint(self.rate_mbps, self.delay_ms, self.loss_pct)

    @property
    def cell(self) -> tuple:
        """What a trial is a repetition of; with several clients also how many offload it at once, and
        the transfer settings, delay and loss when the sweep varies them (marked, as a delay and a loss
        may be equal numbers); a local trial's device when there are several."""
        cell = (self.op, self.size, self.rate_mbps, self.method, self.server)
        link = tuple((k, v) for k, v in (("delay", self.delay_ms), ("loss", self.loss_pct)) if v is not None)
        settings = (self.clients, self.parallelism, self.io_kb, self.concurrency, self.dataset, *link)
        if self.method == LOCAL:  # clients of several devices: a baseline each (a remote cell runs
            settings += (self.device,)  # on clients of every device at once)
        extra = tuple(v for v in settings if v is not None)
        return cell if not extra else (*cell, *extra)


def plan_trials(exp: Experiment) -> list[Trial]:
    trials: list[Trial] = []

    devices = device_names(exp)

    def add(op, size, point, method, rep, server="", clients=None, client=None, *settings):
        device = devices[client - 1] if devices and client else None
        rate, delay, loss = (point.rate_mbps, point.delay_ms, point.loss_pct) if point else (None, None, None)
        trials.append(
            Trial(
                len(trials),
                op,
                size,
                exp.dtype,
                rate,
                method,
                rep,
                server,
                clients,
                client,
                *settings,
                device=device,
                delay_ms=delay,
                loss_pct=loss,
                dataset=exp.dataset_of(size),
            )
        )

    # the local baseline: on client 1, and with clients of several devices on the first client of each
    baselines = [None] if not devices else [devices.index(d) + 1 for d in dict.fromkeys(devices)]
    if exp.local:
        for op in exp.ops:
            for size in exp.sizes_of(op):
                for rep, client in product(range(exp.reps), baselines):
                    add(op, size, None, LOCAL, rep, "", None, client)
    for op in exp.ops:
        for size in exp.sizes_of(op):
            for point in exp.link_points():
                for method, server in offloads(exp.methods, exp.servers, op):
                    # the settings a sweep varies, then each repetition with its clients (k at once)
                    # and each client's request streams (c outstanding)
                    for setting, c, k in product(
                        exp.transfer_settings(), exp.concurrency or (None,), exp.contention or (None,)
                    ):
                        clients = range(1, k + 1) if k else (None,)
                        streams = range(1, c + 1) if c and not exp.datasets else (None,)
                        for rep, client, stream in product(range(exp.reps), clients, streams):
                            add(op, size, point, method, rep, server, k, client, *setting, c, stream)
    return trials


def device_names(exp: Experiment) -> list[str]:
    """Each client host's device by its profile's name (what rows record), client 1 first; empty when
    the clients are of one device."""
    return [load_device(ref).name for ref in exp.client_devices]


def rate_groups(
    exp: Experiment, trials: list[Trial], done: set[int] = frozenset()
) -> list[tuple[LinkPoint | None, list[Trial]]]:
    """(point of the link, trials still to run) per group, in execution order: the local baseline
    first (None), then the rates ascending, each with its delays and losses ascending; each group
    shuffled by the experiment's seed."""
    out = []
    for point in ([None] if exp.local else []) + exp.link_points():
        todo = [t for t in trials if t.link == point and t.trial not in done]
        rng = random.Random(f"{exp.seed}-{point.seed_text() if point else None}")
        rng.shuffle(todo)
        if todo:
            out.append((point, todo))
    return out
