"""Emulating a device profile on this host (`scaled` mode): calibrate, check, and scale a trial.

`calibrate` measures the CPU seconds this host spends on exactly the work the trials will time (each
operation at each size, each codec's encode of the request and decode of the response), turns each
into a slowdown (the device's target time over this host's), then measures again and reports how
close the scaled times come to the targets, as iperf3 reports how close the link comes to its rate.
`Scaler` applies the slowdowns to a trial's client stages: CPU time measured around exactly the
stage, times the slowdown of its kind of work. Communication and the server are measured, not scaled.

CPU time, not wall time: a stage's CPU time does not include waiting, so what another process on a
busy host takes does not end up in the device's times.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import time
import zlib
from collections.abc import Callable

import numpy as np

from contracts.codecs import get_codec
from contracts.device import DeviceProfile, Grid, key, work
from contracts.ops import execute
from contracts.profiles import too_short
from contracts.stats import ci95
from contracts.trials import method_codec

Work = Callable[[], object]


def trial_operands(op: str, size: int, dtype: str, seed: int) -> list[np.ndarray]:
    """The operands every trial of (op, size, dtype) uses: the same on every host for a seed."""
    from client.offload import make_operands

    rng = np.random.default_rng([seed, size, zlib.crc32(op.encode()), zlib.crc32(dtype.encode())])
    return make_operands(op, size, dtype, rng)


MIN_SAMPLE_S = 0.02  # a sample repeats work shorter than this, so the clock's noise does not dominate
BUDGET_S = 5.0  # scaled calibration: sampling a work goes on until its mean is known, or this is spent
MAX_ROUNDS = 400
WALL_BUDGET_S = 20.0  # throttle's check: a sample takes the device's time, so a larger budget (wall)
PROFILE_PRECISION = 0.05  # a measured device: each work's mean known within 5%


def precise(samples: list[float], precision: float) -> bool:
    """Whether the mean's 95% CI half-width is within `precision` of the mean."""
    if len(samples) < 2:
        return False
    return float(ci95(statistics.stdev(samples), len(samples))) <= precision * statistics.mean(samples)


def sampled(
    jobs: list[Work],
    rounds: int,
    clock=time.process_time,
    seed: int = 1,
    batch: bool = True,
    before: Callable[[int], object] | None = None,
    enough: Callable[[int, list[float]], bool] | None = None,
    budget_s: float = BUDGET_S,
    max_rounds: int = MAX_ROUNDS,
) -> list[list[float]]:
    """Seconds of one run of each work, one sample per round: `samples[i][r]`.

    Each round runs every work once, in an order shuffled from the seed, as a sweep interleaves its
    trials: a work never follows itself, so caches and the allocator are as cold as in a trial
    (back-to-back repetitions of one work reuse its memory and come out faster than any trial).
    With `batch`, work shorter than `MIN_SAMPLE_S` is repeated within its sample and divided;
    without, every sample is one run (what a throttled trial sees, quota periods and all).
    `before(i)` runs ahead of every sample of work `i`, outside it (the throttle's quota and period
    alignment).

    With `enough`, sampling goes on after `rounds` (in pairs of rounds) for every work `i` whose
    samples are not yet `enough(i, samples)`, until `budget_s` has gone into it (its samples and what
    `before` waited) or it has `max_rounds` samples: a mean of a few samples is not a fact on a shared host (measured
    here: CPU time of one run spread over 58-346% of its median, two means of 5 samples 10-20%
    apart). Work alone in a round is preceded by an untimed run of the other work closest to it in
    length (as much memory through the caches, and no long wait under a throttle's quota), so that
    it still never follows itself.
    """
    runs, first = [], []
    for job in jobs:
        start = clock()
        job()
        first.append(max(clock() - start, 1e-6))
        runs.append(max(1, math.ceil(MIN_SAMPLE_S / first[-1])) if batch else 1)
    samples: list[list[float]] = [[] for _ in jobs]
    spent = [0.0] * len(jobs)
    rng = random.Random(seed)
    done = 0
    while True:
        if done < rounds:
            order = list(range(len(jobs)))
        elif enough is None:
            break
        else:
            order = [
                i
                for i in range(len(jobs))
                if not enough(i, samples[i]) and spent[i] < budget_s and len(samples[i]) < max_rounds
            ]
            if not order:
                break
        for _ in range(1 if done < rounds else 2):
            rng.shuffle(order)
            if len(order) == 1 and len(jobs) > 1:
                alone = order[0]
                others = [i for i in range(len(jobs)) if i != alone]
                jobs[min(others, key=lambda i: abs(math.log(first[i] / first[alone])))]()
            for i in order:
                ahead = clock()
                if before:
                    before(i)
                start = clock()
                for _ in range(runs[i]):
                    jobs[i]()
                end = clock()
                spent[i] += end - ahead  # a throttle's alignment counts against the budget too
                samples[i].append((end - start) / runs[i])
            done += 1
    return samples


def mean_seconds(
    jobs: list[Work],
    reps: int,
    precision: float,
    budget_s: float = BUDGET_S,
    settled: list[bool] | None = None,
    **how,
) -> tuple[list[float], list[int]]:
    """Seconds of one run of each work, the mean of at least `reps` samples taken in rounds, and more
    until the mean is known within `precision` (95% CI) or `budget_s` is spent (`sampled`), except
    for work `settled` beforehand; and how many samples each took."""

    def enough(i: int, s: list[float]) -> bool:
        return bool(settled and settled[i]) or precise(s, precision)

    samples = sampled(jobs, reps, enough=enough, budget_s=budget_s, **how)
    return [statistics.mean(s) for s in samples], [len(s) for s in samples]


def works(
    op: str, size: int, dtype: str, seed: int, codecs: list[str]
) -> list[tuple[str, str | None, Work, int]]:
    """(kind, codec, work, bytes of matrix data) for everything a trial of (op, size) times on the client."""
    operands = trial_operands(op, size, dtype, seed)
    out: list[tuple[str, str | None, Work, int]] = [("kernel", None, lambda: execute(op, operands), 0)]
    result = execute(op, operands)
    for name in codecs:  # a method: a codec, or a transport timed as its codec (grpc: protobuf)
        codec = get_codec(method_codec(name))
        body, headers = codec.encode_response(result)
        body = bytes(body) if not isinstance(body, bytes) else body
        out.append(
            ("encode", name, lambda c=codec: c.encode_request(operands), sum(a.nbytes for a in operands))
        )
        out.append(
            ("decode", name, lambda c=codec, b=body, h=headers: c.decode_response(b, h), result.nbytes)
        )
    return out


def target_s(
    device: DeviceProfile, kind: str, op: str, size: int, codec: str | None, data_bytes: int
) -> float:
    if kind == "kernel":
        return device.compute_s(op, size)
    return device.marshal_s(codec, kind, data_bytes)


def _row(
    kind: str, codec: str | None, op: str, size: int, target: float, achieved: float, tolerance_pct: float
) -> dict:
    error = (achieved - target) / target * 100
    return {
        "key": key(kind, op, size, codec),
        "work": kind if codec is None else f"{codec} {kind}",
        "op": op,
        "size": size,
        "target_s": target,
        "achieved_s": achieved,
        "error_pct": round(error, 2),
        "flagged": abs(error) > tolerance_pct,
    }


def _items(grid: Grid) -> list[tuple]:
    """(op, size, kind, codec, work, bytes of matrix data) for every kind of work of the grid."""
    return [
        (op, size, *w)
        for op in grid.ops
        for size in grid.sizes
        for w in works(op, size, grid.dtype, grid.seed, list(grid.codecs))
    ]


def calibrate(
    device: DeviceProfile,
    grid: Grid,
    reps: int = 10,
    tolerance_pct: float = 10.0,
    budget_s: float = BUDGET_S,
) -> dict:
    """Slowdowns for every kind of work of the grid, and the check of each against its target.

    Means, not medians: a trial's scaled stage is its CPU time times the slowdown, and the analysis
    compares the means of trials, so the slowdown is the target over the mean. The mean is also the
    steadier of the two here: one run's CPU time is often bimodal (JSON decode of 400x400 took
    either ~68 or ~100 ms), and a median of a few samples jumps between the modes (measured: two
    medians of 10 samples more than 10% apart in 40-65% of draws for JSON and uJSON, two means in
    13-36%). At least `reps` samples each for the slowdowns and the check, and more until each mean
    is known within half the tolerance (95% CI) or the work's `budget_s` is spent: the check's error
    is the difference of the two means, so what is left of it is the host's noise.
    """
    items = _items(grid)
    jobs = [item[4] for item in items]
    # two measurements, the slowdowns' and the check's, from alternate rounds: a spell of load on the
    # host (which inflates CPU time too, through shared caches) falls on both alike rather than on
    # one (measured: a test suite on the other core during the first of two passes taken one after
    # the other flagged every kind of work at -13% to -46%)
    samples = sampled(
        jobs,
        2 * reps,
        seed=grid.seed,
        enough=lambda _, s: all(precise(s[h::2], tolerance_pct / 200) for h in (0, 1)),
        budget_s=budget_s,
    )
    host = [statistics.mean(s[0::2]) for s in samples]
    again = [statistics.mean(s[1::2]) for s in samples]
    rows, scale = [], {}
    for (op, size, kind, codec, _, data), host_s, again_s, taken in zip(
        items, host, again, samples, strict=True
    ):
        target = target_s(device, kind, op, size, codec, data)
        factor = target / max(host_s, 1e-7)
        scale[key(kind, op, size, codec)] = factor
        row = _row(kind, codec, op, size, target, again_s * factor, tolerance_pct)
        rows.append({**row, "host_cpu_s": host_s, "slowdown": factor, "samples": len(taken)})
    return {"device": device.name, "mode": "scaled", "rows": rows, "scale": scale}


def check_wall(
    device: DeviceProfile,
    grid: Grid,
    reps: int = 5,
    tolerance_pct: float = 10.0,
    quotas: dict[str, float] | None = None,
    only: list[str] | None = None,
) -> dict:
    """`throttle` mode's check, run inside the device's CPU limit: the wall time of each kind of work
    against its target, one run per sample, sampled in rounds as a sweep interleaves its trials: the
    mean of at least `reps` samples, and more until it is known within half the tolerance or
    `WALL_BUDGET_S` has gone into the work (its samples and their alignment), unless the work is
    too short for its quota to be trusted at all (`contracts.profiles.too_short`).
    With `quotas` (fraction of a core per `key`), each sample runs under its work's own quota, as the
    trial worker's stages do; each row says the quota period it ran under. `only`: these keys."""
    from client.throttle import Aligner, in_force

    items = [
        (op, size, kind, codec, run, data)
        for op, size, kind, codec, run, data in _items(grid)
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
        tolerance_pct / 200,
        budget_s=WALL_BUDGET_S,
        settled=settled,
        clock=time.perf_counter,
        seed=grid.seed,
        batch=False,
        before=before,
    )
    rows = []
    for (op, size, kind, codec, _, _), target, wall, period, n in zip(
        items, targets, walls, periods, counts, strict=True
    ):
        row = _row(kind, codec, op, size, target, wall, tolerance_pct)
        rows.append({**row, "period_s": period, "samples": n})
    return {"device": device.name, "mode": "throttle", "rows": rows}


def measure_profile(
    name: str, ops: list[str], sizes: list[int], codecs: list[str], reps: int = 5, seed: int = 1
) -> DeviceProfile:
    """This machine as a device profile: what `python -m client profile` runs on a real device.

    The same work the trials time, on the same operands: GFLOP/s per op at each size, and per codec
    the encode and decode throughput in MB/s of matrix data over all sizes. Each from the mean CPU
    time of one run, all the work of one size sampled in rounds until each mean is known within
    `PROFILE_PRECISION` or its budget is spent, as the scaled calibration does.
    """
    from contracts.device import SpeedCurve

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


def profile_yaml(device: DeviceProfile, comment: str = "") -> str:
    """The profile as a file of experiments/devices (written by hand: a device needs no YAML library)."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [
        f"name: {device.name}",
        f"description: {json.dumps(device.description)}",
        f"source: {json.dumps(device.source)}",
        f"cores: {device.cores}",
        f"blas_threads: {device.blas_threads}",
        "kernels:                      # GFLOP/s of the operation's work at each size",
    ]
    for op, curve in device.kernels.items():
        lines.append(f"  {op}: {{{', '.join(f'{s}: {g:g}' for s, g in curve.points)}}}")
    lines.append("marshalling:                  # MB/s of matrix data")
    for codec, speeds in device.marshalling.items():
        lines.append(f"  {codec}: {{encode: {speeds['encode']:g}, decode: {speeds['decode']:g}}}")
    return "\n".join(lines) + "\n"


class Scaler:
    """Turns a worker's measured record into the device's times (scaled mode)."""

    def __init__(self, scale: dict[str, float]) -> None:
        self.scale = scale

    def factor(self, kind: str, op: str, size: int, codec: str | None = None) -> float:
        k = key(kind, op, size, codec)
        if k not in self.scale:
            raise KeyError(f"no calibration for {k}: the sweep calibrates every op, size and method it runs")
        return self.scale[k]

    def local(self, out: dict, op: str, size: int) -> None:
        out["wall_total"] = out["t_total"]
        out["t_total"] = out["cpu_total"] * self.factor("kernel", op, size)

    def remote(self, out: dict, op: str, size: int, codec: str) -> None:
        for stage, kind in (("client_encode", "encode"), ("client_decode", "decode")):
            out[f"wall_{stage}"] = out[f"t_{stage}"]
            out[f"t_{stage}"] = out[f"cpu_{stage}"] * self.factor(kind, op, size, codec)
        out["t_total"] = out["t_client_encode"] + out["t_request"] + out["t_client_decode"]


def main(argv: list[str] | None = None) -> int:
    """`python -m client.emulation < REQUEST.json`: calibrate this host for a device, print JSON.

    The request: {"device": <profile as JSON>, "grid": <Grid as JSON>, "tolerance_pct": ...,
    "check": "wall" for throttle mode's check, "quotas": its per-work quotas, "only": the keys to check}.
    """
    import json
    import sys

    request = json.load(sys.stdin)
    device = DeviceProfile.from_dict(request["device"])
    grid = Grid.from_dict(request["grid"])
    check = check_wall if request.get("check") == "wall" else calibrate  # wall: throttle, inside the limit
    extra = {k: request[k] for k in ("quotas", "only") if request.get(k)}
    json.dump(check(device, grid, tolerance_pct=request["tolerance_pct"], **extra), sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
