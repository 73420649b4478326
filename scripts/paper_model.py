"""What the paper's two devices predict for its grid, without running a sweep.

`python scripts/paper_model.py` prints, per op, size, rate and method, the modelled local and remote
times of paper-p4 (client) and paper-i3 (server, CGI stack) from the sweep's own duration model
(`testbed.estimate.DurationModel.trial_s`), the decision vectors, and each of the paper's statements this
model can judge, with its role and reading as `analysis.paper_checks` sets them (`fit`: the profiles were
derived from it; `held out`: they were not, so it checks them, and the score counts these; `the paper's
anomaly`: reported, not scored), judged by the same code as a measured run, so that a prediction and a
measurement are scored alike. `--json` gives the same as one object.

It needs no root and runs nothing on the testbed. Bytes on the wire come from encoding a small sample
with each codec (deterministic); no speed of this machine enters (both devices' figures cover every
stage). The model is the mean of a trial without noise: a cell whose margin is a few percent is a
border the paper's 40 repetitions may have called either way, so margins are printed with the marks.
The tolerances below are this script's, stated with each check.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.decisions import cumulative_penalties, decision_vectors  # noqa: E402
from analysis.paper_checks import held_out_summary, paper_checks  # noqa: E402
from contracts.stages import LOCAL  # noqa: E402
from testbed.devices import load_device  # noqa: E402
from testbed.estimate import DurationModel, HostSpeeds  # noqa: E402
from testbed.experiment import Experiment, Validation  # noqa: E402

SIZES = (400, 500, 600, 700, 800, 900, 1000, 1100, 1200)
RATES = (10, 20, 40, 60, 80, 100)  # Mbit/s
METHODS = ("json", "ujson", "raw")
SAMPLE = 64


def wire_ratios(methods=METHODS, seed: int = 1) -> dict[str, float]:
    """Body bytes per byte of matrix data, per method: a sample trial encoded with the codec (the
    sweep's operands are uniform in [0, 1), so JSON's text has the same length per number)."""
    from contracts.codecs import CODECS
    from contracts.ops import execute
    from contracts.wire import body_bytes

    rng = np.random.default_rng(seed)
    operands = [rng.random((SAMPLE, SAMPLE)) for _ in range(2)]
    result = execute("mul", operands)
    out = {}
    for name in methods:
        codec = CODECS[name]
        up = len(body_bytes(codec.encode_request(operands)[0]))
        down = len(body_bytes(codec.encode_response(result)[0]))
        out[name] = (up + down) / (3 * result.nbytes)
    return out


def paper_model(client: str = "paper-p4", server: str = "paper-i3", ops=("mul",)) -> DurationModel:
    """The duration model with both devices; this machine's speeds are not measured (NaN: a stage that
    fell back to them would show as NaN, not as a plausible number)."""
    exp = Experiment(
        name="paper-model", ops=tuple(ops), sizes=SIZES, rates_mbps=tuple(float(r) for r in RATES),
        methods=METHODS, reps=40, warmup=0, validation=Validation(enabled=False), server_stack="cgi",
    )  # fmt: skip
    host = HostSpeeds(gflops=float("nan"), codecs={}, wire_ratio=wire_ratios())
    return DurationModel(exp, host, load_device(client), server_device=load_device(server))


@dataclass(frozen=True)
class Cell:
    op: str
    size: int
    rate: int
    method: str
    local_s: float
    remote_s: float
    compute_s: float  # the server's compute: the only stage that is not marshalling

    @property
    def offload(self) -> bool:
        return self.remote_s < self.local_s

    @property
    def penalty(self) -> float:
        return self.remote_s - self.local_s

    @property
    def marshalling_ratio(self) -> float:
        return (self.remote_s - self.compute_s) / self.remote_s


def predict(model: DurationModel) -> list[Cell]:
    """Every cell of the grid (the model's `trial_s` adds the CGI start-up, the server device's
    `stack.server_start`, to every HTTP trial)."""
    server = model.server_device
    cells = []
    for op in model.exp.ops:
        for size in SIZES:
            local = model.trial_s(op, size, None, LOCAL)
            compute = server.compute_s(op, size)
            for rate in RATES:
                for method in METHODS:
                    remote = model.trial_s(op, size, rate, method)
                    cells.append(Cell(op, size, rate, method, local, remote, compute))
    return cells


class Grid:
    """Lookups over the predicted cells, with their decision vectors and cumulative penalties as the
    analysis makes them from a measured run's cells (`analysis.decisions`), so the model and a run are
    judged by one piece of code."""

    def __init__(self, cells: list[Cell]):
        self.cells = {(c.op, c.size, c.rate, c.method): c for c in cells}
        table, key = model_cells(cells), ["op", "size", "method"]
        self.vectors = decision_vectors(table).set_index(key)["vector"]
        self.penalties = cumulative_penalties(table).set_index(key)["cumulative_penalty"]

    def cell(self, size: int, rate: int, method: str, op: str = "mul") -> Cell:
        return self.cells[(op, size, rate, method)]

    def vector(self, size: int, method: str, op: str = "mul") -> str:
        """The decision vector over the six rates, a mark per rate (`1`: offloading pays), unspaced."""
        return self.vectors[(op, size, method)].replace(" ", "")

    def penalty(self, size: int, method: str, op: str = "mul") -> float:
        """The cumulative penalty: remote less local, summed over the six rates."""
        return float(self.penalties[(op, size, method)])


def model_cells(cells: list[Cell]) -> pd.DataFrame:
    """The model's cells in the analysis's shape (`analysis.cells.cell_table`), for the paper's checks:
    means without noise (CIs zero, every difference significant)."""
    return pd.DataFrame(
        [
            {"op": c.op, "size": c.size, "rate_mbps": float(c.rate), "method": c.method, "n": 1,
             "mean": c.remote_s, "ci95": 0.0, "local_mean": c.local_s, "offload": int(c.offload),
             "significant": True, "penalty": c.penalty, "t_server_compute_mean": c.compute_s,
             "t_server_compute_ci95": 0.0}
            for c in cells
        ]
    ).astype({"offload": "Int64", "significant": "boolean"})  # fmt: skip


def judge(grid_cells: list[Cell]) -> list[dict]:
    """The paper's statements on the model (`analysis.paper_checks`, as on a measured run)."""
    checks = paper_checks(model_cells(grid_cells))
    return [
        {"n": int(r.n), "statement": r.statement, "paper": r.paper, "model": r.measured, "holds": r.holds,
         "use": r.use, "reading": r.reading}
        for r in checks.itertuples(index=False)
    ]  # fmt: skip


def report(cells: list[Cell]) -> str:
    grid = Grid(cells)
    lines = ["size  rate  method  local_s  remote_s  margin  marshalling"]
    for c in cells:
        margin = (c.local_s - c.remote_s) / c.local_s
        lines.append(
            f"{c.size:4d} {c.rate:5d}  {c.method:6s} {c.local_s:8.2f} {c.remote_s:9.2f} {margin:+7.0%}"
            f"  {c.marshalling_ratio:6.0%}"
        )
    lines += ["", f"decision vectors over {' '.join(map(str, RATES))} Mbit/s (1: offload pays)"]
    for size in SIZES:
        vectors = "  ".join(f"{m} {grid.vector(size, m)}" for m in METHODS)
        penalties = " ".join(f"{grid.penalty(size, m):7.2f}" for m in METHODS)
        lines.append(f"{size:4d}  {vectors}   cumulative penalty [json ujson raw] {penalties}")
    rows = judge(cells)
    lines += [
        "",
        "statement                                                               use                  holds  paper / model",
    ]
    for r in rows:
        mark = {"holds": "yes", "fails": "NO"}.get(r["holds"], r["holds"])
        lines.append(
            f"{r['n']:2d} {r['statement'][:68]:68s} {r['use']:20s} {mark:5s}  {r['paper']} / {r['model']}"
        )
    lines.append(f"{held_out_summary(paper_checks(model_cells(cells)))} (inv and log are not modelled)")
    lines += ["", "readings (where the paper's words admit two):"]
    lines += [f"{r['n']:2d} {r['reading']}" for r in rows if r["reading"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", default="paper-p4")
    parser.add_argument("--server", default="paper-i3")
    parser.add_argument("--json", action="store_true", help="one JSON object: cells, vectors and checks")
    args = parser.parse_args(argv)
    cells = predict(paper_model(args.client, args.server))
    if args.json:
        grid = Grid(cells)
        out = {
            "cells": [c.__dict__ for c in cells],
            "vectors": {f"{s} {m}": grid.vector(s, m) for s in SIZES for m in METHODS},
            "checks": judge(cells),
        }
        print(json.dumps(out, indent=1))
    else:
        print(report(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
