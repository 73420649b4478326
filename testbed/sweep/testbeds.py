"""What a sweep keeps of each of its testbeds for the session: its worker(s), its calibration, the rates it validated or skipped, and how it was found and is to be left."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from contracts.cpu_lock import CpuLock
from contracts.grid import LinkPoint, is_unshaped
from contracts.worker_api import WorkerEmulation
from testbed.backends.lab import Lab
from testbed.backends.life_cycle import LabUse
from testbed.experiment import Experiment
from testbed.quiet import NoQuiet, Quiet
from testbed.run_files import ManifestFile
from testbed.sweep.trials import validate_or_heal
from testbed.sweep.worker_link import WorkerLink


@dataclass
class Testbed:
    """One of a sweep's testbeds and what the sweep keeps of it for the session."""

    lab: Lab
    worker: WorkerLink | None = None
    calibration: WorkerEmulation | None = None  # what its trial worker needs to emulate the devices
    problems: dict = field(default_factory=dict)  # point of the link -> why it is skipped (None: validated)
    warmed: set = field(default_factory=set)  # rates its worker was warmed up at
    workers: dict = field(default_factory=dict)  # several clients: the further clients' workers, by role
    # each further client host that calibrates (`Sweep.calibrated_clients`): its calibration, by the
    # host's role
    emulations: dict = field(default_factory=dict)
    use: LabUse | None = None  # brought up or found up: left as found at the end
    cpu_lock: CpuLock = field(init=False)  # the replicas' host-wide lock, this testbed's own open file
    quiet: Quiet | NoQuiet = field(default_factory=NoQuiet)  # trials shared, validations alone

    def __post_init__(self) -> None:
        self.cpu_lock = CpuLock(self.lab.inv.cpu_lock)

    def prepare(
        self, point: LinkPoint | None, exp: Experiment, manifest: ManifestFile, show: Callable
    ) -> str | None:
        """Its link at `point` for a group: shaped and validated the first time a session meets the
        point, shaped again after (validated earlier); the unshaped link (an RPC study's) cleared, with
        nothing to validate; the local baseline (None) as it is. Why the point cannot be used, or None."""
        if point is None:
            return None
        lab = self.lab
        lab.delay_ms, lab.loss_pct = point.delay_ms, point.loss_pct  # what `set_rate` shapes with
        if is_unshaped(point.rate_mbps):
            lab.clear_shaping()
            self.problems.setdefault(point, None)
        elif point not in self.problems:
            show(f"validating {point.label()}")
            # iperf3 through a userspace switch is CPU work: no replica's transfer or stage beside it
            with self.quiet.alone(), self.cpu_lock.held():
                self.problems[point] = validate_or_heal(lab, exp, point.rate_mbps, manifest)
        elif not self.problems[point]:
            lab.set_rate(int(round(point.rate_mbps * 1e6)))  # validated earlier in this session
        return self.problems.get(point)
