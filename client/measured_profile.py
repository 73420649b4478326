"""This machine as a device profile: what `python -m client profile` runs on a real device."""

from __future__ import annotations

import os

from client.calibration_work import works
from client.sampling import mean_seconds
from contracts.device import DeviceProfile, SpeedCurve, work

PROFILE_PRECISION = 0.05  # each work's mean known within 5%


def measure_profile(
    name: str, ops: list[str], sizes: list[int], codecs: list[str], reps: int = 5, seed: int = 1
) -> DeviceProfile:
    """This machine as a device profile: what `python -m client profile` runs on a real device.

    The same work the trials time, on the same operands: GFLOP/s per op at each size, and per codec
    the encode and decode throughput in MB/s of matrix data over all sizes. Each from the mean CPU
    time of one run, all the work of one size sampled in rounds until each mean is known within
    `PROFILE_PRECISION` or its budget is spent, as the scaled calibration does.
    """
    kernels: dict[str, list[tuple[int, float]]] = {}
    marshalled: dict[str, dict[str, list[float]]] = {}
    for op in ops:
        for size in sizes:
            items = works(op, size, "float64", seed, codecs)
            means, _ = mean_seconds([item[2] for item in items], reps, PROFILE_PRECISION, seed=seed)
            for (kind, codec, _, data), mean in zip(items, means, strict=True):
                seconds = max(mean, 1e-9)
                if codec is None:
                    kernels.setdefault(op, []).append((size, round(work(op, size) / seconds / 1e9, 4)))
                else:
                    totals = marshalled.setdefault(codec, {}).setdefault(kind, [0.0, 0.0])
                    totals[0] += data
                    totals[1] += seconds
    return DeviceProfile(
        name=name,
        kernels={op: SpeedCurve(tuple(points)) for op, points in kernels.items()},
        marshalling={
            c: {d: round(b / s / 1e6, 3) for d, (b, s) in dirs.items()} for c, dirs in marshalled.items()
        },
        cores=os.cpu_count() or 1,
        blas_threads=1,
    )
