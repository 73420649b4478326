"""The `throttle` mode's check: the wall time of each kind of work under its own CPU quota."""

from __future__ import annotations

import time

from client.calibration_work import grid_works, target_s
from client.sampling import mean_seconds
from contracts.calibration import Calibration, CalibrationRow
from contracts.device import DeviceProfile, Grid, key
from contracts.profiles import too_short
from contracts.tolerance import DEFAULT, DeviceTolerance

WALL_BUDGET_S = 20.0  # a sample takes the device's time, so a larger budget than the scaled one (wall)


def check_wall(
    device: DeviceProfile,
    grid: Grid,
    reps: int = 5,
    tolerance: DeviceTolerance = DEFAULT,
    quotas: dict[str, float] | None = None,
    only: list[str] | None = None,
) -> Calibration:
    """`throttle` mode's check, run inside the device's CPU limit: the wall time of each kind of work
    against its target, one run per sample, sampled in rounds as a sweep interleaves its trials: the
    mean of at least `reps` samples, and more until it is known within half the tolerance's percent or
    `WALL_BUDGET_S` has gone into the work (its samples and their alignment), unless the work is
    too short for its quota to be trusted at all (`contracts.profiles.too_short`).
    With `quotas` (fraction of a core per `key`), each sample runs under its work's own quota, as the
    trial worker's stages do; each row says the quota period it ran under. `only`: these keys."""
    from client.throttle import Aligner, in_force

    items = [
        (op, size, kind, codec, run, data)
        for op, size, kind, codec, run, data in grid_works(grid)
        if only is None or key(kind, op, size, codec) in only
    ]
    aligner = Aligner(quotas=quotas)
    periods: list[float | None] = [None] * len(items)

    def before(i: int) -> None:
        """Where a trial's stage would start: its quota in force, at a known point of a period."""
        op, size, kind, codec, _, _ = items[i]
        aligner.trial(op, size, codec)
        aligner(kind)
        period = in_force(aligner.limit)
        periods[i] = period.period_s if period else None

    targets = [target_s(device, kind, op, size, codec, data) for op, size, kind, codec, _, data in items]
    # work too short for its quota's periods is flagged whatever it measures: more samples of it
    # would not help (measured: 9-27 samples of each RAW stage doubled a 15-min calibration)
    settled = [
        bool(quotas) and too_short(target, quotas.get(key(kind, op, size, codec), quotas["base"]))
        for (op, size, kind, codec, _, _), target in zip(items, targets, strict=True)
    ]
    walls, counts = mean_seconds(
        [item[4] for item in items],
        reps,
        tolerance.pct / 200,
        budget_s=WALL_BUDGET_S,
        settled=settled,
        clock=time.perf_counter,
        seed=grid.seed,
        batch=False,
        before=before,
    )
    if quotas:  # a whole core again: the host probes after the check time the host, not a quota
        aligner.put(1.0)
    rows = [
        CalibrationRow.of(kind, codec, op, size, target, wall, tolerance, period_s=period, samples=n)
        for (op, size, kind, codec, _, _), target, wall, period, n in zip(
            items, targets, walls, periods, counts, strict=True
        )
    ]
    return Calibration(
        tolerance_pct=tolerance.pct,
        tolerance_ms=tolerance.ms,
        rows=rows,
        device=device.name,
        mode="throttle",
        role=grid.role,
    )
