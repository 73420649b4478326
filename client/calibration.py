"""`python -m client.calibration < REQUEST.json`: the device calibration on this host, as JSON.

The orchestrator (`testbed.sweep.device_emulation`) sends the request: the scaled mode's calibration
(`client.scaled_calibration`) or, with `"check": "wall"`, the throttle mode's check inside the
device's CPU limit (`client.throttle_check`).
"""

from __future__ import annotations

import json
import sys

from client.scaled_calibration import calibrate
from client.throttle_check import check_wall
from contracts.device import DeviceProfile, Grid
from contracts.message import encode
from contracts.processes import end_when_unheard
from contracts.steadiness import Steadiness, probe_pass
from contracts.tolerance import DeviceTolerance


def main(argv: list[str] | None = None) -> int:
    """Calibrate this host for a device, print the `contracts.calibration.Calibration` as JSON.

    The request: {"device": <profile as JSON>, "grid": <Grid as JSON>, "tolerance_pct": ...,
    "tolerance_ms": ... (the experiment's `contracts.tolerance.DeviceTolerance`), "check":
    "wall" for throttle mode's check, "quotas": its per-work quotas, "only": the keys to check}.
    The host's speed is probed before and after (`contracts.steadiness`) and recorded with it.
    """
    request = json.load(sys.stdin)
    device = DeviceProfile.from_dict(request["device"])
    grid = Grid.from_dict(request["grid"])
    check = check_wall if request.get("check") == "wall" else calibrate  # wall: throttle, inside the limit
    extra = {k: request[k] for k in ("quotas", "only") if request.get(k)}
    tolerance = DeviceTolerance(request["tolerance_pct"], request["tolerance_ms"])
    before = probe_pass()  # the host's speed around the work: a calibration on an unsteady host says so
    result = check(device, grid, tolerance=tolerance, **extra)
    result.steadiness = Steadiness.of(before + probe_pass(), tolerance.pct)
    json.dump(encode(result), sys.stdout)
    return 0


if __name__ == "__main__":
    end_when_unheard()  # a sweep killed (-9) while it calibrates: its calibration ends at once
    raise SystemExit(main())
