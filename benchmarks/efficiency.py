"""Offloading efficiency: a raw `mul` through the embedded testbed against its wire-time lower bound.

For each link condition (shaped to 100 Mbit/s, then unshaped) iperf3 measures the TCP goodput in
both directions, then trials run through the sweep's worker on the client host (CPU limit off). The
lower bound of a trial is what the wire and the server's arithmetic alone need:

    bytes_up * 8 / goodput_up + bytes_down * 8 / goodput_down + server compute time

(bodies only: iperf3's goodput is payload too). The figure is the median over repetitions of
completion time / bound; target at 100 Mbit/s for raw: at most 1.10 (HTTP, marshalling and the
switch add at most 10%). Unshaped, the bound is small and the figure shows what the software costs
per trial. `grpc` (protobuf messages over HTTP/2) gets the same figure, for information: its bodies
are the protobuf codec's, and its marshalling is part of what it costs.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.common import Row, median, skipped
from benchmarks.session import BenchError, goodput, run_ok, trial
from contracts.stages import GRPC
from testbed.backends.lab import Lab
from testbed.sweep.worker_link import WorkerLink

SECTION = "efficiency"
RATE_MBPS = 100.0
CONDITIONS = (RATE_MBPS, None)  # None: unshaped
SIZES = (800, 1200)
QUICK_SIZES = (300,)
TARGET = ("<=", 1.10)
METHODS = ("raw", GRPC)  # raw has the target; grpc is information
GOODPUT = "iperf3 goodput up"
RATIO = "completion / wire-time bound"


def label(rate_mbps: float | None) -> str:
    return f"{rate_mbps:g} Mbit/s" if rate_mbps else "unshaped"


def cases(quick: bool) -> list[tuple[str, str, str, tuple | None]]:
    """(figure, case, unit, target) of every row, in order."""
    out = []
    for rate in CONDITIONS:
        out.append((GOODPUT, label(rate), "Mbit/s", None))
        out += [
            (RATIO, f"{label(rate)} {m} mul {n}", "x", TARGET if rate == RATE_MBPS and m == "raw" else None)
            for m in METHODS
            for n in (QUICK_SIZES if quick else SIZES)
        ]
    return out


def run_condition(
    lab: Lab, worker: WorkerLink, rate_mbps: float | None, sizes: tuple[int, ...], reps: int, duration: int
) -> list[Row]:
    if rate_mbps:
        lab.set_rate(int(rate_mbps * 1e6))
    else:
        lab.clear_shaping()
    gp = goodput(lab, rate_mbps, duration)
    rows = [
        Row(
            SECTION,
            GOODPUT,
            label(rate_mbps),
            gp["up"] / 1e6,
            "Mbit/s",
            note=f"down {gp['down'] / 1e6:.2f} Mbit/s",
            details={"up_Mbps": gp["up"] / 1e6, "down_Mbps": gp["down"] / 1e6},
        )
    ]
    for method, n in ((m, n) for m in METHODS for n in sizes):
        if n == min(sizes):
            run_ok(worker, trial(0, n, rate_mbps, method))  # warm-up: the method's first request
        ratios, totals, bounds = [], [], []
        for rep in range(reps):
            r = run_ok(worker, trial(rep, n, rate_mbps, method))
            bound = r.bytes_up * 8 / gp["up"] + r.bytes_down * 8 / gp["down"] + r.t_server_compute
            ratios.append(r.t_total / bound)
            totals.append(r.t_total)
            bounds.append(bound)
        rows.append(
            Row(
                SECTION,
                RATIO,
                f"{label(rate_mbps)} {method} mul {n}",
                median(ratios),
                "x",
                TARGET if rate_mbps == RATE_MBPS and method == "raw" else None,
                note=f"{median(totals):.3f} s against a bound of {median(bounds):.3f} s "
                f"(median of {reps}; worst {max(ratios):.3f}x)",
                details={
                    "reps": reps,
                    "completion_s": median(totals),
                    "bound_s": median(bounds),
                    "worst_ratio": max(ratios),
                },
            )
        )
    return rows


def run(lab: Lab, worker: WorkerLink, quick: bool = False, progress: Callable = print) -> list[Row]:
    sizes = QUICK_SIZES if quick else SIZES
    reps, duration = (2, 1) if quick else (5, 3)
    rows: list[Row] = []
    for rate in CONDITIONS:
        mul = f"mul {', '.join(map(str, sizes))} x {reps}"
        progress(f"efficiency: {label(rate)}: iperf3, then {' and '.join(METHODS)} {mul}")
        try:
            rows += run_condition(lab, worker, rate, sizes, reps, duration)
        except BenchError as exc:
            rows += [
                skipped(SECTION, f, c, u, str(exc), t) for f, c, u, t in cases(quick) if label(rate) in c
            ]
    return rows
