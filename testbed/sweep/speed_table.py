"""`testbed speed-table`: how fast the client and the server multiply matrices.

The client runs under its CPU limit, the server does not; their ratio is the speed-up offloading can
buy, which together with the link rate decides where offloading pays.
"""

from __future__ import annotations

import json

from testbed.backends.lab import Lab


def speed_table(lab: Lab, sizes: list[int], reps: int = 3) -> list[dict]:
    """Per size, the mean time and GFLOP/s of a matrix multiplication on each host, and their ratio."""
    rows = []
    args = ("--sizes", ",".join(map(str, sizes)), "--reps", str(reps))
    measured = {}
    for role in ("client", "server"):
        host = lab.host(role)
        measured[role] = json.loads(host.run(host.python("client.matmul_speed", *args), timeout=3600).stdout)
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


def format_speed_table(rows: list[dict], profile: str) -> str:
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
