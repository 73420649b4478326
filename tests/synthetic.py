"""A synthetic run in the sweep's format, from a crude cost model, for trying out the analysis.

Plots, the report and `scripts/check-report.sh` need a run of realistic shape without a testbed; the
numbers only have to look plausible (marshalling grows with size^2 and falls with rate, compute grows
with size^3), not to be right. `python -m tests.synthetic RUN_DIR` writes one.

With `devices`, the run's clients are of several devices (one client each, all offloading every cell
at once, as a sweep's `clients: [{device, count}, ...]` does by default): each device's client work
(its local baseline, its encode and decode) is the model's times its slowdown, and its profile in the
manifest says exactly those times (and its power figures, if given), so tests know every answer.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contracts.device import DeviceProfile, SpeedCurve, work
from contracts.run import (
    MANIFEST_FILE,
    TRIALS_FILE,
    Device,
    Experiment,
    LinkCheck,
    Manifest,
    TrialRecord,
    TrialWriter,
    write_manifest,
)
from contracts.stages import LOCAL

# seconds per byte to encode / decode, and bytes on the wire per float64 element
CODEC = {"json": (40e-9, 24.0), "ujson": (15e-9, 24.0), "raw": (0.5e-9, 8.0), "msgpack": (3e-9, 9.0)}
# local seconds per size^3 (or per size^2 for element-wise ops) on the slow client; the server is 8x faster
OPS = {"mul": (2e-8, 3), "inv": (1e-8, 3), "log": (2e-7, 2)}


@dataclass(frozen=True)
class SyntheticDevice:
    """A client device of a synthetic run: its profile's name, how many times the model's its client
    work takes (local compute, client encode and decode), and its watts (`contracts.power.FIGURES`:
    cpu_active_w, cpu_idle_w, radio_tx_w, radio_rx_w; None: its profile has no power figures)."""

    name: str
    slowdown: float = 1.0
    watts: dict[str, float] | None = None

    def profile(self, ops, sizes, methods) -> dict:
        """Its profile (`DeviceProfile.as_dict`), whose targets are the model's times for it: kernels
        at each size, and each codec's speed of float64 `mul` operands (the model's bytes on the wire
        are `CODEC`'s width per element, the profile's MB/s are of the matrix data, 8 per element)."""
        kernels = {
            op: SpeedCurve(
                tuple((s, work(op, s) / (_local(op, s) * self.slowdown * 1e9)) for s in sorted(sizes))
            )
            for op in ops
        }
        speed = {m: 8 / (CODEC[m][0] * CODEC[m][1] * self.slowdown * 1e6) for m in methods if m in CODEC}
        power = {k: {"value": v, "source": "synthetic"} for k, v in (self.watts or {}).items()}
        return DeviceProfile(
            name=self.name,
            kernels=kernels,
            marshalling={m: {"encode": v, "decode": v} for m, v in speed.items()},
            description=f"synthetic, {self.slowdown:g}x the model's client times",
            extra={"power": power} if power else {},
        ).as_dict()


def _local(op: str, size: int) -> float:
    """The model's local seconds of `op` at `size` on the slow client."""
    per, power = OPS.get(op, OPS["mul"])
    return per * size**power


def write_synthetic_run(
    run_dir: Path,
    *,
    ops=("mul",),
    sizes=(400, 800),
    rates=(10, 40, 100),
    methods=("json", "ujson", "raw"),
    reps=5,
    fail_every: int = 0,
    seed: int = 1,
    replicas: int = 1,
    drift: float = 0.0,
    devices: tuple[SyntheticDevice, ...] = (),
    delays: tuple[float, ...] = (),
) -> Path:
    """Write trials.csv and manifest.json; every `fail_every`-th remote trial fails (0: none). With
    `replicas`, repetition r ran on replica r % replicas, whose times are `1 + drift * replica` times
    the model's (a replica effect to find). With two or more `devices`, client i is devices[i - 1]:
    each runs its own local baseline and every remote cell, all of them at once (sharing the link:
    communication takes their number times the model's). With `delays` (one-way, ms), every rate at
    each of them: communication three round trips (twice the delay each) longer."""
    if len(devices) == 1:
        raise ValueError("one synthetic device is the run's own: give none, or two or more")
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    trials = _Trials(run_dir.name, rng, devices, fail_every, replicas, drift)
    for op in ops:
        for size in sizes:
            trials.local_cell(op, size, reps)
            for rate in rates:
                for delay in delays or (None,):
                    for method in methods:
                        trials.remote_cell(op, size, rate, method, reps, delay)
    path = run_dir / TRIALS_FILE
    path.unlink(missing_ok=True)
    writer = TrialWriter(path)
    for row in trials.rows:
        writer.write(row)
    writer.close()
    grid = {"ops": ops, "sizes": sizes, "rates": rates, "methods": methods, "reps": reps, "delays": delays}
    write_manifest(run_dir / MANIFEST_FILE, _manifest(trials.run_id, rng, devices, **grid))
    return run_dir


class _Trials:
    """A synthetic run's trials as they are made, in the sweep's order (numbered, each with a start
    time): every cell's repetitions, on each client host (one without devices, as before)."""

    def __init__(
        self,
        run_id: str,
        rng: np.random.Generator,
        devices: tuple[SyntheticDevice, ...],
        fail_every: int,
        replicas: int,
        drift: float,
    ) -> None:
        self.run_id, self.rng, self.fail_every = run_id, rng, fail_every
        self.replicas, self.drift = replicas, drift
        # each client: (its device's name, slowdown, client number)
        self.hosts = [(d.name, d.slowdown, i) for i, d in enumerate(devices, 1)] or [(None, 1.0, None)]
        self.together = len(devices) or None  # clients offloading each cell at once
        self.rows: list[TrialRecord] = []

    def add(self, **row) -> None:
        """One row, numbered in order, started a second after the last; with replicas, on its
        repetition's replica, its times that replica's drift off the model's."""
        started = f"2026-01-01T00:00:{len(self.rows) % 60:02d}"
        row = {"ok": True, **row}
        if self.replicas > 1:
            row["replica"] = row["rep"] % self.replicas
            factor = 1 + self.drift * row["replica"]
            row.update({k: v * factor for k, v in row.items() if k.startswith("t_") and v is not None})
        self.rows.append(
            TrialRecord(run_id=self.run_id, trial=len(self.rows), dtype="float64", started_at=started, **row)
        )

    def local_cell(self, op: str, size: int, reps: int) -> None:
        """The local baseline: the model's local time, times each client's slowdown."""
        local = _local(op, size)
        for rep in range(reps):
            for device, slowdown, client in self.hosts:
                on = {"device": device, "client": client} if device else {}
                self.add(
                    op=op, size=size, method=LOCAL, rep=rep, t_total=local * slowdown * _noise(self.rng), **on
                )

    def remote_cell(
        self, op: str, size: int, rate: float, method: str, reps: int, delay: float | None = None
    ) -> None:
        """Each stage from the model: marshalling proportional to the bytes (the server 8x faster),
        communication the bytes over the rate (shared by the clients at once) plus 2 ms."""
        local = _local(op, size)
        cost, width = CODEC.get(method, CODEC["json"])
        up, down = 2 * size * size * width, size * size * width
        for rep in range(reps):
            for device, slowdown, client in self.hosts:
                on = {"device": device, "client": client, "clients": self.together} if device else {}
                cell = {"op": op, "size": size, "rate_mbps": rate, "method": method, "rep": rep, **on}
                if delay is not None:
                    cell["delay_ms"] = delay
                if self.fail_every and len(self.rows) % self.fail_every == 0:
                    self.add(**cell, ok=False, error="synthetic failure")
                    continue
                t = {
                    "t_client_encode": cost * up * slowdown,
                    "t_comm": (up + down) * 8 / (rate * 1e6) * (self.together or 1)
                    + 0.002
                    + 3 * 2 * (delay or 0) / 1000,
                    "t_server_decode": cost * up / 8,
                    "t_server_compute": local / 8,
                    "t_server_encode": cost * down / 8,
                    "t_client_decode": cost * down * slowdown,
                }
                t = {k: v * _noise(self.rng) for k, v in t.items()}
                self.add(**cell, t_total=sum(t.values()), bytes_up=int(up), bytes_down=int(down), **t)


def _manifest(
    run_id: str, rng: np.random.Generator, devices, *, ops, sizes, rates, methods, reps, delays=()
) -> Manifest:
    """The run's manifest: its grid, each rate's link checked within 0.2% of its goodput, and with
    devices each one's profile (client 1's as the run's device)."""
    validation = [
        LinkCheck(
            rate_mbps=r,
            direction=d,
            expected_mbps=round(r * 0.9564, 3),
            measured_mbps=round(r * 0.9564 * (1 + rng.normal(0, 0.002)), 3),
            error_pct=0.1,
            ok=True,
        )
        for r in rates
        for d in ("up", "down")
    ]
    experiment = Experiment(
        name="synthetic",
        ops=tuple(ops),
        sizes=tuple(sizes),
        rates_mbps=tuple(float(r) for r in rates),
        methods=tuple(methods),
        reps=reps,
        delays_ms=tuple(float(d) for d in delays),
        **_clients(devices),
    )
    profiles = [Device(d.profile(ops, sizes, methods), "scaled") for d in devices]
    return Manifest(
        run_id=run_id,
        status="synthetic",
        experiment=experiment,
        environment={"generator": "tests.synthetic"},
        validation=validation,
        started_at="2026-01-01T00:00:00",
        ended_at="2026-01-01T01:00:00",
        device=profiles[0] if profiles else None,
        client_devices=profiles[1:],
        client_device_names=[d.name for d in devices] if len(devices) > 1 else [],
    )


def _clients(devices: tuple[SyntheticDevice, ...]) -> dict:
    """The experiment's clients: one per device, all offloading each cell at once (none: one client)."""
    if not devices:
        return {}
    names = tuple(d.name for d in devices)
    return {
        "clients": len(names),
        "contention": (len(names),),
        "client_device": names[0],
        "client_devices": names,
    }


def _noise(rng: np.random.Generator) -> float:
    return float(rng.lognormal(0.0, 0.05))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--paper", action="store_true", help="the paper's grid: 3 ops x 9 sizes x 6 rates x 3 methods"
    )
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    grid = {}
    if args.paper:
        grid = {
            "ops": ("mul", "inv", "log"),
            "sizes": tuple(range(400, 1201, 100)),
            "rates": (10, 20, 40, 60, 80, 100),
        }
    write_synthetic_run(args.run_dir, reps=args.reps, fail_every=97, **grid)
    print(f"synthetic run written to {args.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
