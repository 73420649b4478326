"""What a sweep is set up with before anything runs: its experiment (a file with flags over it, or a
resumed run's own), where its run lives, the devices its hosts emulate, and the inventories of its
testbeds adjusted to them. Resolved once, where the command enters, into a typed `SweepSetup`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from contracts.device import DeviceProfile
from contracts.errors import UserError
from contracts.grid import rate_label
from contracts.run import MANIFEST_FILE
from contracts.stages import PYTHON, unserved
from testbed.estimate import DurationModel, model_for
from testbed.experiment import FLAGS, Experiment, load_experiment, trial_range
from testbed.inventory import Inventory, load_inventory
from testbed.overrides import override
from testbed.run_files import ManifestFile, new_run_id
from testbed.sweep.device_emulation import client_cpu as emulation_cpu
from testbed.sweep.device_emulation import resolve_client_devices, resolve_device, resolve_server_device
from testbed.sweep.plan import device_names


@dataclass(frozen=True)
class SweepSetup:
    """A sweep resolved from the command line: the experiment, the run (a new one's id, or the resumed
    run's manifest), the devices, and each testbed's inventory as the devices need it."""

    exp: Experiment
    run_dir: Path
    run_id: str
    manifest: ManifestFile | None  # the resumed run's; None for a new run (written once labs are open)
    inventories: list[Inventory]
    device: DeviceProfile | None  # the client's (client 1's when clients are of several devices)
    server_device: DeviceProfile | None

    @property
    def resume(self) -> bool:
        return self.manifest is not None

    def model(self) -> DurationModel:
        """The devices' time model: the sweep's estimate and its progress line's ETA."""
        cpu = None if self.device else self.inventories[0].client_cpu.cpu_quota
        return model_for(self.exp, self.device, cpu, self.server_device)

    def headline(self, testbeds: int) -> str:
        """The sweep's first line: its grid, its devices, its testbeds and where its results go."""
        exp, inv, device = self.exp, self.inventories[0], self.device
        client = f"device {device.name} ({exp.mode})" if device else f"CPU {inv.client_cpu.describe()}"
        if exp.client_devices:
            counts = Counter(device_names(exp))
            client = f"devices {', '.join(f'{n} x{k}' for n, k in counts.items())} ({exp.mode})"
        paced = exp.together  # requests queue at the server: it lasts the device's times
        server = "this host"
        if self.server_device:
            server = f"device {self.server_device.name} ({'paced' if paced else 'scaled'})"
        low, high = trial_range(exp)
        if exp.datasets:  # a transfer sweep (docs/transfers.md)
            return transfer_headline(self.run_id, exp, client, low) + f"results in {self.run_dir}"
        if exp.rpc_study:  # docs/rpc-study.md
            return rpc_headline(self.run_id, exp, low) + f"results in {self.run_dir}"
        parts = [
            f"sweep {self.run_id}: {len(exp.ops)} op(s) x {len(exp.sizes)} size(s) x "
            f"{len(exp.rates_mbps)} rate(s) x "
            + (f"{len(exp.delays_ms)} delay(s) x " if exp.delays_ms else "")
            + (f"{len(exp.losses_pct)} loss(es) x " if exp.losses_pct else "")
            + f"{len(exp.methods)} method(s)"
            + (f" (grpc on {', '.join(exp.servers)})" if exp.servers != (PYTHON,) else "")
            + (f" ({left})" if (left := unserved(exp.ops, exp.methods, exp.servers)) else "")
            + f" x {exp.describe_reps()} = {low if low == high else f'{low}..{high}'} trials "
            f"(local baseline included); client {client}; server {server}; "
        ]
        if testbeds > 1:
            parts.append(f"on {testbeds} testbeds side by side; ")
        if exp.clients > 1:
            parts.append(
                f"{exp.clients} clients, {'/'.join(map(str, exp.contention))} offloading at once, "
                f"{exp.server_workers} server worker(s); "
            )
        if exp.concurrency:
            parts.append(f"{'/'.join(map(str, exp.concurrency))} request(s) outstanding per client; ")
        return "".join(parts) + f"results in {self.run_dir}"


def resolve_setup(
    inventory_paths: list[Path | None],
    experiment: Path | None,
    flags: dict,
    no_validate: bool,
    resume: Path | None,
    results: Path,
) -> SweepSetup:
    """The sweep's setup from the command's arguments (`flags`: the experiment's FLAGS given on the
    command line, None where not given). A resumed run takes its own experiment and devices."""
    invs = [load_inventory(path) for path in inventory_paths]
    manifest = None
    if resume:
        if experiment or any(flags.get(k) is not None for k in FLAGS) or no_validate:
            raise UserError(
                "--resume takes the run's own experiment; other settings cannot change it",
                "drop the experiment file and flags when resuming",
            )
        manifest = ManifestFile.load(resume / MANIFEST_FILE)
        exp, run_dir, run_id = manifest.manifest.experiment, resume, manifest.manifest.run_id
    else:
        base = load_experiment(experiment) if experiment else None
        exp = override(base, {**{k: flags.get(k) for k in FLAGS}, "no_validate": no_validate})
        run_id = new_run_id(exp.name)
        run_dir = results / run_id
    device = resolve_device(exp, invs[0], manifest)
    server_device = resolve_server_device(exp, invs[0], manifest)
    invs = _fitted(invs, exp, device, server_device, manifest)
    return SweepSetup(exp, run_dir, run_id, manifest, invs, device, server_device)


def _fitted(
    invs: list[Inventory],
    exp: Experiment,
    device: DeviceProfile | None,
    server_device: DeviceProfile | None,
    manifest: ManifestFile | None,
) -> list[Inventory]:
    """The inventories as the devices need them: the client's CPU profile, the server's BLAS threads,
    the number of client hosts."""
    if device:
        invs = [i.with_client_cpu(emulation_cpu(device, exp.mode)) for i in invs]
    elif exp.client_cpu:
        invs = [i.with_client_cpu(exp.client_cpu) for i in invs]
    if server_device:  # its processes compute with the device's BLAS threads
        invs = [i.with_server_blas(server_device.blas_threads) for i in invs]
    for other in resolve_client_devices(exp, manifest).values():  # one BLAS setting for the client hosts
        if device and other.blas_threads != device.blas_threads:
            raise UserError(
                f"devices {device.name} and {other.name} compute with {device.blas_threads} and "
                f"{other.blas_threads} BLAS threads, and the client hosts share one setting",
                "give the clients' profiles the same blas_threads",
            )
    if exp.clients > 1:  # several clients on the (one) testbed
        invs = [i.with_clients(exp.clients) for i in invs]
    return invs


def transfer_headline(run_id: str, exp: Experiment, client: str, trials: int) -> str:
    """A transfer sweep's first line: its datasets and settings."""
    settings = [f"{k} {'/'.join(map(str, getattr(exp, k)))}" for k in ("concurrency", "parallelism", "io_kb")]
    return (
        f"sweep {run_id}: fetch {', '.join(exp.datasets)} x {len(exp.rates_mbps)} rate(s) x "
        + (f"{len(exp.delays_ms)} delay(s) x " if exp.delays_ms else "")
        + (f"{len(exp.losses_pct)} loss(es) x " if exp.losses_pct else "")
        + f"{'; '.join(s for s in settings if not s.endswith(' '))} x {exp.describe_reps()} = {trials} fetches; "
        f"client {client} (its power figures); "
    )


def rpc_headline(run_id: str, exp: Experiment, trials: int) -> str:
    """An RPC study's first line: its operations at their sizes, transports and links."""
    ops = ", ".join(f"{op} {'/'.join(map(str, exp.sizes_of(op)))}" for op in exp.ops)
    servers = f" on {', '.join(exp.servers)}" if exp.servers != (PYTHON,) else ""
    calls = "/".join(str(exp.calls_of(r)) for r in exp.rates_mbps) if exp.calls_at else exp.calls
    return (
        f"sweep {run_id}: RPC study, {ops} x {', '.join(exp.methods)}{servers} x "
        f"{', '.join(rate_label(r) for r in exp.rates_mbps)} x {exp.describe_reps()} = {trials} batches "
        f"of {calls} calls, at host speed (no device emulated); "
    )
