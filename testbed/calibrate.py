"""`testbed calibrate`: how fast the emulated device and the server multiply matrices.

The client runs under its CPU limit, the server does not; their ratio is the speed-up offloading can
buy, which together with the link rate decides where offloading pays.
"""

from __future__ import annotations

import json

from testbed.lab import Lab


def calibrate(lab: Lab, sizes: list[int], reps: int = 3) -> list[dict]:
    rows = []
    args = ("--sizes", ",".join(map(str, sizes)), "--reps", str(reps))
    measured = {}
    for role in ("client", "server"):
        host = lab.host(role)
        measured[role] = json.loads(host.run(host.python("client.calibrate", *args), timeout=3600).stdout)
    for c, s in zip(measured["client"], measured["server"], strict=True):
        rows.append(
            {
                "size": c["size"],
                "client_s": c["mean_s"],
                "client_gflops": c["gflops"],
                "server_s": s["mean_s"],
                "server_gflops": s["gflops"],
                "speedup": c["mean_s"] / s["mean_s"],
            }
        )
    return rows


def format_calibration(rows: list[dict], profile: str) -> str:
    lines = [
        f"client CPU profile: {profile}",
        f"{'size':>6} {'client s':>10} {'GFLOP/s':>8} {'server s':>10} {'GFLOP/s':>8} {'speed-up':>9}",
    ]
    for r in rows:
        lines.append(
            f"{r['size']:>6} {r['client_s']:>10.4f} {r['client_gflops']:>8.2f} {r['server_s']:>10.4f} "
            f"{r['server_gflops']:>8.2f} {r['speedup']:>8.1f}x"
        )
    return "\n".join(lines)
