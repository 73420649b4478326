"""The `scaled` mode's calibration: this host's slowdown for every kind of work, and its check.

It measures the CPU seconds this host spends on exactly the work the trials will time (each
operation at each size, each codec's encode of the request and decode of the response), turns each
into a slowdown (the device's target time over this host's), then measures again and reports how
close the scaled times come to the targets, as iperf3 reports how close the link comes to its rate.
`client.scaler.Scaler` applies the slowdowns to a trial's client stages.

CPU time, not wall time: a stage's CPU time does not include waiting, so what another process on a
busy host takes does not end up in the device's times.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from client.calibration_work import grid_works, target_s
from client.sampling import BUDGET_S, SelfTimed, Work, precise, sampled
from contracts.calibration import Calibration, CalibrationRow, work_key
from contracts.device import DeviceProfile, Grid
from contracts.short_work import cpu_clock, per_run_cpu_s
from contracts.tolerance import DEFAULT, DeviceTolerance


def calibrate(
    device: DeviceProfile,
    grid: Grid,
    reps: int = 10,
    tolerance: DeviceTolerance = DEFAULT,
    budget_s: float = BUDGET_S,
) -> Calibration:
    """Slowdowns for every kind of work of the grid, and the check of each against its target.

    Means, not medians: a trial's scaled stage is its CPU time times the slowdown, and the analysis
    compares the means of trials, so the slowdown is the target over the mean. The mean is also the
    steadier of the two here: one run's CPU time is often bimodal (JSON decode of 400x400 took
    either ~68 or ~100 ms), and a median of a few samples jumps between the modes (measured: two
    medians of 10 samples more than 10% apart in 40-65% of draws for JSON and uJSON, two means in
    13-36%). At least `reps` samples each for the slowdowns and the check, and more until each mean
    is known within half what the tolerance allows its target (95% CI: `sampling_precision`) or the
    work's `budget_s` is spent: the check's error
    is the difference of the two means, so what is left of it is the host's noise.
    """
    items = grid_works(grid)
    jobs = [as_in_a_trial(item[4], item[2]) for item in items]
    targets = [target_s(device, kind, op, size, codec, data) for op, size, kind, codec, _, data in items]
    within = [sampling_precision(tolerance, t) for t in targets]
    # two measurements, the slowdowns' and the check's, from alternate rounds: a spell of load on the
    # host (which inflates CPU time too, through shared caches) falls on both alike rather than on
    # one (measured: a test suite on the other core during the first of two passes taken one after
    # the other flagged every kind of work at -13% to -46%)
    # one sample per run, timed as a trial times its stage (`as_in_a_trial`: self-timed, so never batched)
    samples = sampled(
        jobs,
        2 * reps,
        seed=grid.seed,
        enough=lambda i, s: all(precise(s[h::2], within[i]) for h in (0, 1)),
        budget_s=budget_s,
    )
    host = [statistics.mean(s[0::2]) for s in samples]
    again = [statistics.mean(s[1::2]) for s in samples]
    rows, scale = [], {}
    for (op, size, kind, codec, _, _), target, precision, host_s, again_s, taken in zip(
        items, targets, within, host, again, samples, strict=True
    ):
        factor = target / max(host_s, 1e-7)
        scale[work_key(kind, op, size, codec)] = factor
        row = CalibrationRow.of(
            kind, codec, op, size, target, again_s * factor, tolerance,
            host_cpu_s=host_s, slowdown=factor, samples=len(taken),
        )  # fmt: skip
        if row.flagged:  # the error is the two means' difference: this host's noise, said as such
            known = all(precise(taken[h::2], precision) for h in (0, 1))
            row = replace(row, reason=_noisy(len(taken) // 2, known, precision, budget_s))
        rows.append(row)
    return Calibration(
        tolerance_pct=tolerance.pct,
        tolerance_ms=tolerance.ms,
        rows=rows,
        scale=scale,
        device=device.name,
        mode="scaled",
        role=grid.role,
    )


def as_in_a_trial(work: Work, kind: str) -> SelfTimed:
    """A sample of `work` timed as a trial's stage is: one run, and a short run again over repeated
    runs (`contracts.short_work`), so that the slowdown scales the very figure the trials report.
    Timed otherwise, the two disagreed: one run per sample put the smoke run's RAW stages 24-42% off
    in the calibration's own check and 32-51% below their targets in the trials (2026-11-27), and
    batched samples without a trial's single run once put them 200-950% above. Work that times itself
    (a cgi request's stage, reported by the server, which times it so) is taken as it is."""
    if isinstance(work, SelfTimed):
        return work
    clock = cpu_clock(kind)  # a trial's clock for this kind of work

    def run() -> float:
        start = clock()
        work()
        return per_run_cpu_s(work, clock() - start, clock)

    return SelfTimed(run)


def sampling_precision(tolerance: DeviceTolerance, target: float) -> float:
    """How closely (relative 95% CI half-width) a work's mean is sampled: within half of what its
    target allows, both parts of the tolerance (a device's 0.4 ms stage may miss by 0.1 ms, 25%, so
    its mean need not be known to 5%: sampling it that closely spent the budget on the clock's noise)."""
    return tolerance.halved().allowed_s(target) / target if target > 0 else tolerance.pct / 200


def _noisy(samples: int, known: bool, precision: float, budget_s: float) -> str:
    """Why a scaled row missed: the two means of its alternate rounds differed, each of `samples`."""
    return f"this host's CPU time for it varied: two means of {samples} samples each" + (
        "" if known else f", neither known within ±{100 * precision:.3g}% when its {budget_s:g} s ran out"
    )
