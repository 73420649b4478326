"""What a sweep keeps of each of its testbeds for the session: its worker(s), its calibration, the rates it validated or skipped, and how it was found and is to be left."""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.cpu_lock import CpuLock
from contracts.worker_api import WorkerEmulation
from testbed.backends.lab import Lab
from testbed.backends.life_cycle import LabUse
from testbed.quiet import NoQuiet, Quiet
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
