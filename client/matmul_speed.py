"""Local matrix multiplication times on this host, to pick a CPU profile that models a device."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def measure(sizes: list[int], reps: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        a, b = rng.random((n, n)), rng.random((n, n))
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        best, mean = min(times), sum(times) / len(times)
        rows.append({"size": n, "mean_s": mean, "best_s": best, "gflops": 2 * n**3 / mean / 1e9})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m client.matmul_speed", description=__doc__)
    parser.add_argument("--sizes", default="200,400,800")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    json.dump(measure([int(s) for s in args.sizes.split(",")], args.reps), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
