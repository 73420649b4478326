"""A transfer sweep's own set-up (`datasets:`, op fetch; docs/transfers.md): the datasets generated on
the server host from the experiment's seed and served by its offload server, and the client device
recorded for its power figures only (a fetch has no stage a device's speed would set: its time is the
link's and the hosts', so nothing is calibrated)."""

from __future__ import annotations

from contracts.device import DeviceProfile
from contracts.run import Device
from testbed.backends.lab import Lab
from testbed.experiment import Experiment
from testbed.run_files import ManifestFile

DATASETS_DIR = "datasets"  # in the server host's state directory (`down` removes it)
GENERATE_TIMEOUT_S = 600.0  # 20 MB of seeded bytes; minutes under the guest's emulated CPU


def serve_datasets(lab: Lab) -> None:
    """The server the testbed starts serves the datasets from its state directory."""
    lab.datasets = str(lab.host("server").state_dir / DATASETS_DIR)


def make_datasets(lab: Lab, exp: Experiment) -> None:
    """The experiment's datasets on the server host (kept when already made from this seed)."""
    server = lab.host("server")
    argv = server.python("server.datasets", "--dir", lab.datasets, "--seed", str(exp.seed), *exp.datasets)
    server.run(argv, limited=False, timeout=GENERATE_TIMEOUT_S)


def record_device(manifest: ManifestFile, device: DeviceProfile | None, exp: Experiment) -> None:
    """The client device's profile in the manifest, uncalibrated: what the energy view reads."""
    if device is not None and manifest.manifest.device is None:
        manifest.manifest.device = Device(profile=device.as_dict(), mode=exp.mode)
        manifest.save()
