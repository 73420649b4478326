"""Which trials a sweep runs, and in what order.

Trial ids number the grid in one fixed order (op, size, rate, method, server, rep; the local baseline
first; with several clients, (..., server, clients at once, rep, client); with concurrency, the
requests outstanding per client before the clients, and each request stream after its client; with
clients of several devices, each local repetition once per device, on that device's first client), so
a resumed sweep knows exactly which trials are missing. Only the method grpc has servers of
its own (`contracts.stages.offloads`): a run with the Python server alone numbers its trials as runs
before servers did. The execution order within each rate group
(local baseline, then each rate) is shuffled from the experiment's seed, so slow drift on the machine
does not line up with any one factor.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import product

from contracts.grid import sizes_for
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

    @property
    def cell(self) -> tuple:
        """What a trial is a repetition of; with several clients also how many offload it at once, and
        the transfer settings when the sweep varies them; a local trial's device when there are several."""
        cell = (self.op, self.size, self.rate_mbps, self.method, self.server)
        settings = (self.clients, self.parallelism, self.io_kb, self.concurrency)
        if self.method == LOCAL:  # clients of several devices: a baseline each (a remote cell runs
            settings += (self.device,)  # on clients of every device at once)
        extra = tuple(v for v in settings if v is not None)
        return cell if not extra else (*cell, *extra)


def plan_trials(exp: Experiment) -> list[Trial]:
    trials: list[Trial] = []

    devices = device_names(exp)

    def add(op, size, rate, method, rep, server="", clients=None, client=None, *settings):
        device = devices[client - 1] if devices and client else None
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
            )
        )

    # the local baseline: on client 1, and with clients of several devices on the first client of each
    baselines = [None] if not devices else [devices.index(d) + 1 for d in dict.fromkeys(devices)]
    if exp.local:
        for op in exp.ops:
            for size in sizes_for(op, exp.sizes):
                for rep, client in product(range(exp.reps), baselines):
                    add(op, size, None, LOCAL, rep, "", None, client)
    for op in exp.ops:
        for size in sizes_for(op, exp.sizes):
            for rate in exp.rates_mbps:
                for method, server in offloads(exp.methods, exp.servers):
                    # the settings a sweep varies, then each repetition with its clients (k at once)
                    # and each client's request streams (c outstanding)
                    for setting, c, k in product(
                        exp.transfer_settings(), exp.concurrency or (None,), exp.contention or (None,)
                    ):
                        clients = range(1, k + 1) if k else (None,)
                        streams = range(1, c + 1) if c else (None,)
                        for rep, client, stream in product(range(exp.reps), clients, streams):
                            add(op, size, rate, method, rep, server, k, client, *setting, c, stream)
    return trials


def device_names(exp: Experiment) -> list[str]:
    """Each client host's device by its profile's name (what rows record), client 1 first; empty when
    the clients are of one device."""
    return [load_device(ref).name for ref in exp.client_devices]


def rate_groups(
    exp: Experiment, trials: list[Trial], done: set[int] = frozenset()
) -> list[tuple[float | None, list[Trial]]]:
    """(rate, trials still to run) per rate group, in execution order: the local baseline first (rate
    None), then the rates ascending; each group shuffled by the experiment's seed."""
    out = []
    for rate in ([None] if exp.local else []) + list(exp.rates_mbps):
        todo = [t for t in trials if t.rate_mbps == rate and t.trial not in done]
        rng = random.Random(f"{exp.seed}-{rate}")
        rng.shuffle(todo)
        if todo:
            out.append((rate, todo))
    return out
