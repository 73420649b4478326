"""A sweep's setup, resolved once where the command enters (`testbed.sweep.setup`): the experiment with
the command's flags over it, the devices, the inventories fitted to them, and the sweep's first line."""

from __future__ import annotations

import pytest

from contracts.errors import UserError
from testbed.experiment import FLAGS
from testbed.sweep.setup import resolve_setup
from tests.helpers import REPO

INVENTORY = REPO / "inventory.yaml"
SMOKE = REPO / "experiments" / "smoke.yaml"


def flags(**given) -> dict:
    return {**dict.fromkeys(FLAGS), **given}


def test_a_new_run_takes_its_experiment_devices_and_a_fresh_run_dir(tmp_path):
    setup = resolve_setup([INVENTORY], SMOKE, flags(reps=4), False, None, tmp_path)
    assert not setup.resume and setup.manifest is None
    assert setup.run_dir == tmp_path / setup.run_id and setup.run_id.startswith(setup.exp.name)
    assert setup.exp.reps == 4  # the flag over the file
    assert setup.device is not None and setup.device.name == "paper-p4"
    assert setup.server_device is not None and setup.server_device.name == "paper-i3"
    # the client host is fitted to the device's mode; the server to its BLAS threads
    assert setup.inventories[0].server_blas_threads == setup.server_device.blas_threads
    line = setup.headline(testbeds=2)
    assert line.startswith(f"sweep {setup.run_id}: 1 op(s) x 2 size(s) x 2 rate(s) x 3 method(s)")
    assert "client device paper-p4 (scaled)" in line and "server device paper-i3 (scaled)" in line
    assert "on 2 testbeds side by side" in line and line.endswith(f"results in {setup.run_dir}")


def test_a_resumed_run_refuses_other_settings_in_one_line(tmp_path):
    with pytest.raises(UserError, match="--resume takes the run's own experiment"):
        resolve_setup([INVENTORY], None, flags(reps=4), False, tmp_path, tmp_path)
    with pytest.raises(UserError, match="--resume takes the run's own experiment"):
        resolve_setup([INVENTORY], SMOKE, flags(), False, tmp_path, tmp_path)
