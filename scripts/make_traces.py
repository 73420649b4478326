"""Write the shipped link traces (experiments/traces/*.csv) from documented processes.

    .venv/bin/python scripts/make_traces.py [--out experiments/traces]

Each trace is a CSV (`t_s,up_mbps,down_mbps`; see `testbed shape --help`) whose comment names the
process and its parameters. The output is deterministic (the random walk is seeded), and a unit
test checks that the shipped files are what this script writes.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts.trace import ReplayPlan, TraceStep  # noqa: E402
from testbed.link.trace import write_csv  # noqa: E402

MBIT = 1_000_000


def steps() -> tuple[ReplayPlan, str]:
    """Rate steps held 4 s each, down (server -> client) at each level, up at half of it."""
    levels = (10, 40, 20, 80, 5)
    plan = tuple(TraceStep(4.0 * i, level * MBIT // 2, level * MBIT) for i, level in enumerate(levels))
    return ReplayPlan(plan, 4.0 * len(levels)), f"steps: {levels} Mbit/s down, 4 s each; up at half"


def ramp() -> tuple[ReplayPlan, str]:
    """A linear ramp from 5 to 50 Mbit/s and back, one step every 100 ms (10 changes a second)."""
    n = 50
    up = [5 + 45 * i / n for i in range(n)] + [50 - 45 * i / n for i in range(n)]
    plan = tuple(TraceStep(round(0.1 * i, 1), round(r * MBIT), round(r * MBIT)) for i, r in enumerate(up))
    return ReplayPlan(
        plan, round(0.1 * len(up), 1)
    ), "ramp: 5 -> 50 -> 5 Mbit/s both ways, 100 ms steps, 10 s"


def on_off() -> tuple[ReplayPlan, str]:
    """Alternating 2 s at 40 Mbit/s (on) and 2 s at 2 Mbit/s (off), five cycles, both ways."""
    plan = tuple(
        TraceStep(2.0 * i, (2, 40)[i % 2 == 0] * MBIT, (2, 40)[i % 2 == 0] * MBIT) for i in range(10)
    )
    return ReplayPlan(plan, 20.0), "on-off: 40 Mbit/s for 2 s, 2 Mbit/s for 2 s, 5 cycles, both ways"


def cellular(seed: int = 27, seconds: float = 30.0, dt: float = 0.2) -> tuple[ReplayPlan, str]:
    """A cellular-like link: down's log-rate a mean-reverting random walk (Ornstein-Uhlenbeck,
    mean 15 Mbit/s, sd of a step 0.25, reversion 0.1 per step) clipped to 1-60 Mbit/s, up a third
    of down; in each step an outage starts with probability 2% and lasts 0.4-1.2 s (rate 0)."""
    rng = random.Random(seed)
    mean, x, out_left = math.log(15), math.log(15), 0
    rows = []
    for i in range(round(seconds / dt)):
        x += 0.1 * (mean - x) + rng.gauss(0, 0.25)
        x = min(max(x, math.log(1)), math.log(60))
        if out_left == 0 and rng.random() < 0.02:
            out_left = rng.randint(2, 6)  # steps of 0.2 s
        down = 0 if out_left else round(math.exp(x), 1)
        out_left = max(0, out_left - 1)
        rows.append(TraceStep(round(i * dt, 1), round(round(down / 3, 2) * MBIT), round(down * MBIT)))
    what = (
        f"cellular: seed {seed}; log-rate OU walk (mean 15 Mbit/s, step sd 0.25, reversion 0.1) clipped "
        f"to 1-60 Mbit/s down, up a third; outages (rate 0) start with p=0.02 per {dt:g} s step, 0.4-1.2 s"
    )
    return ReplayPlan(tuple(rows), seconds), what


TRACES = {"steps": steps, "ramp": ramp, "on-off": on_off, "cellular": cellular}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "experiments" / "traces"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, make in TRACES.items():
        plan, what = make()
        path = args.out / f"{name}.csv"
        write_csv(
            plan,
            path,
            f"{what}\nwritten by scripts/make_traces.py; each row holds until the next; the last row is the end",
        )
        print(f"{path}: {len(plan.steps)} steps, {plan.end_s:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
