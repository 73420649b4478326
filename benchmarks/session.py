"""The embedded testbed as the testbed benchmarks use it: the client's CPU limit off, left as found.

The benchmarks measure the tool, not the emulated device, so every client process runs outside the
CPU limit: the lab is opened with the inventory's client profile minus its quota (hosts of such a lab
start nothing in the cgroup). A testbed the benchmark brought up is taken down afterwards, also on
Ctrl-C, SIGTERM or an error; one that was already up stays up with the shaping it had (and its offload
server, which is started for the benchmark and stopped again if it was not running).

Trials run through the sweep's own worker (`testbed.sweep.worker_link.WorkerLink`: `python -m client.worker` on the
client host, JSON lines), so the bookkeeping measured is the sweep's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from contracts.worker_api import TrialResult
from testbed.backends import open_lab
from testbed.backends.lab import Lab, require_root
from testbed.experiment import Experiment, Validation
from testbed.inventory import Inventory
from testbed.link.validate import validate_rate
from testbed.signals import sigterm_as_interrupt
from testbed.sweep.plan import Trial
from testbed.sweep.worker_link import WorkerLink

UNSHAPED_NOMINAL_BPS = 10**10  # what validate_rate compares an unshaped link with; only `measured` is used
TRIAL_TIMEOUT = 300.0


class BenchError(Exception):
    """One measurement could not be made; its rows are skipped with this as the reason."""


@contextmanager
def bench_lab(inv: Inventory, progress: Callable[[str], None] = print) -> Iterator[Lab]:
    require_root()
    lab = open_lab(inv.with_client_cpu(replace(inv.client_cpu, cpu_quota=None)))
    started_server = False
    with sigterm_as_interrupt():
        if lab.is_up():
            progress(f"testbed {inv.prefix} is up: using it, shaping restored afterwards")
        else:
            progress(f"bringing testbed {inv.prefix} up (taken down afterwards)")
        with lab.use() as use:
            try:
                if not lab.server_alive():
                    lab.start_offload_server()
                    started_server = not use.brought_up
                yield lab
            finally:
                if started_server:
                    lab.host("server").stop("offload")


def goodput(lab: Lab, rate_mbps: float | None, duration: int) -> dict[str, float]:
    """iperf3's measured TCP goodput per direction (bits/s) on the link as it is shaped now."""
    rate_bps = int(rate_mbps * 1e6) if rate_mbps else UNSHAPED_NOMINAL_BPS
    checks = validate_rate(lab, rate_bps, duration, shape=False)
    out = {c.direction: c.measured_mbps * 1e6 for c in checks if c.measured_mbps}
    if set(out) != {"up", "down"}:
        errors = "; ".join(f"{c.direction}: {c.error}" for c in checks if not c.measured_mbps)
        raise BenchError(f"iperf3 gave no goodput ({errors})")
    return out


# the experiment the benchmarks' worker runs (and the sweep's check restarts a worker with)
BENCH_EXPERIMENT = Experiment(
    name="bench",
    ops=("mul",),
    sizes=(400,),
    rates_mbps=(100.0,),
    methods=("raw",),
    reps=1,
    validation=Validation(enabled=False),
    trial_timeout=TRIAL_TIMEOUT,
)


def start_worker(lab: Lab, log: Path) -> WorkerLink:
    return WorkerLink(lab, BENCH_EXPERIMENT, log)


def trial(n: int, size: int, rate_mbps: float | None, method: str = "raw", op: str = "mul") -> Trial:
    return Trial(n, op, size, "float64", rate_mbps, method, n)


def run_ok(worker: WorkerLink, t: Trial) -> TrialResult:
    """The worker's result of one trial; a failed trial is an error here, not a data point."""
    result = worker.run(t)
    if not result.ok:
        raise BenchError(f"trial {t.op} {t.size} {t.method} failed: {result.error}")
    return result
