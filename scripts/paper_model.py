"""What the paper's two devices predict for its grid under each hypothesis, without running a sweep.

Issue 45 sets two pre-declared hypotheses of what the paper's software sent (`HYPOTHESES`), each an
experiment file: `H-int` (experiments/marshalling-paper-int32.yaml: int32 operands from its
`int_range`, JSON and uJSON text as the era wrote it, the devices paper-p4-int and paper-i3-int) and
`H-float` (experiments/marshalling-paper.yaml: the shipped float64 run, today's text, paper-p4 and
paper-i3). `python scripts/paper_model.py` prints, per hypothesis, the decision vectors of mul, inv
and log and each of the paper's statements with its role and reading as `analysis.paper_checks` sets
them (`fit`: the profiles were derived from it; `held out`: they were not, so it checks them, and
the score counts these; `the paper's anomaly`: reported, not scored), judged by the same code as a
measured run, so that a prediction and a measurement are scored alike; then both scorecards side by
side. `--cells` adds every cell's modelled times, `--json` gives all of it as one object.

The times are the sweep's own duration model (`testbed.estimate.DurationModel.trial_s`) with both
devices; no speed of this machine enters (both devices' figures cover every stage). Bytes on the
wire are each cell's request and response bodies as the experiment's codec text writes them, counted
on rows of the experiment's own operands and results (`bodies`): an integer product's text grows
with the size, and inv's and log's float64 results are written longer than their integer operands.
The model is the mean of a trial without noise: a cell whose margin is a few percent is a border the
paper's 40 repetitions may have called either way, so margins are printed with the marks.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.decisions import cumulative_penalties, decision_vectors  # noqa: E402
from analysis.paper_checks import held_out_summary, paper_checks  # noqa: E402
from contracts.stages import LOCAL  # noqa: E402
from testbed.devices import load_device  # noqa: E402
from testbed.estimate import DurationModel, HostSpeeds  # noqa: E402
from testbed.experiment import Experiment, load_experiment  # noqa: E402

# the hypotheses, each the experiment file that would measure it (issue 45, item 2)
HYPOTHESES = {
    "H-int": ROOT / "experiments" / "marshalling-paper-int32.yaml",
    "H-float": ROOT / "experiments" / "marshalling-paper.yaml",
}
SIZES = (400, 500, 600, 700, 800, 900, 1000, 1100, 1200)
RATES = (10, 20, 40, 60, 80, 100)  # Mbit/s
METHODS = ("json", "ujson", "raw")
ROWS = 16  # rows of each operand and result whose text is counted (the rest are drawn alike)


def hypothesis(name: str) -> Experiment:
    """The hypothesis's experiment, as a sweep would load it: its grid, operands, text and devices."""
    exp = load_experiment(HYPOTHESES[name])
    assert exp.sizes == SIZES and exp.rates_mbps == tuple(map(float, RATES)) and exp.methods == METHODS
    return exp


@functools.cache
def bodies(name: str) -> dict[tuple[str, int, str], tuple[float, float]]:
    """(op, size, method) -> the request's and the response's body bytes under hypothesis `name`: the
    first ROWS rows of the experiment's operands (`client.offload.make_operands`, its dtype, range and
    seed) and of their result, encoded with its codec text, scaled to the whole matrices. inv's rows
    are solved for (the first rows of the inverse) rather than the whole inverse computed."""
    from client.offload import make_operands
    from contracts.codecs import get_codec
    from contracts.ops import execute
    from contracts.wire import body_bytes

    exp = hypothesis(name)
    rng = np.random.default_rng(exp.seed)
    out = {}
    for op in exp.ops:
        for size in exp.sizes:
            operands = make_operands(op, size, exp.dtype, rng, exp.int_range)
            if op == "mul":
                result = execute("mul", [operands[0][:ROWS], operands[1]])
            elif op == "inv":
                a = operands[0].astype(np.float64)
                result = np.linalg.solve(a.T, np.eye(size)[:, :ROWS]).T
            else:
                result = execute(op, [operands[0][:ROWS]])
            scale = size / ROWS
            for method in exp.methods:
                codec = get_codec(method, exp.codec_text)
                up = len(body_bytes(codec.encode_request([o[:ROWS] for o in operands])[0]))
                down = len(body_bytes(codec.encode_response(result)[0]))
                out[(op, size, method)] = (up * scale, down * scale)
    return out


def wire_ratios(name: str, op: str = "mul", size: int = 400) -> dict[str, float]:
    """Body bytes per byte of matrix data, per method, of one cell under hypothesis `name`: what the
    profiles' derivations start from (e.g. uJSON's at mul 600, statement 11)."""
    from contracts.device import operand_bytes, result_bytes

    itemsize = np.dtype(hypothesis(name).dtype).itemsize
    data = operand_bytes(op, size, itemsize) + result_bytes(op, size, itemsize)
    return {m: sum(bodies(name)[(op, size, m)]) / data for m in METHODS}


def paper_model(name: str = "H-int") -> DurationModel:
    """The duration model of hypothesis `name` with both its devices; this machine's speeds are not
    measured (NaN: a stage that fell back to them would show as NaN, not as a plausible number)."""
    exp = hypothesis(name)
    host = HostSpeeds(gflops=float("nan"), codecs={}, wire_ratio={}, bodies=bodies(name))
    return DurationModel(
        exp, host, load_device(exp.client_device), server_device=load_device(exp.server_device)
    )


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


def report(name: str, cells: list[Cell], with_cells: bool = False) -> str:
    """One hypothesis: what it is, (its cells,) its decision vectors and cumulative penalties per op,
    and every statement's verdict with its role, then the held-out score and the readings."""
    exp, grid = hypothesis(name), Grid(cells)
    lines = [
        f"== {name}: {HYPOTHESES[name].relative_to(ROOT)} (dtype {exp.dtype}, int_range "
        f"{list(exp.int_range) if exp.int_range else 'none'}, codec_text {exp.codec_text}; client "
        f"{exp.client_device}, server {exp.server_device}, server_stack {exp.server_stack})",
        "",
    ]
    if with_cells:
        lines.append("op   size  rate  method  local_s  remote_s  margin  marshalling")
        for c in cells:
            margin = (c.local_s - c.remote_s) / c.local_s
            lines.append(
                f"{c.op:4s} {c.size:4d} {c.rate:5d}  {c.method:6s} {c.local_s:8.2f} {c.remote_s:9.2f}"
                f" {margin:+7.0%}  {c.marshalling_ratio:6.0%}"
            )
        lines.append("")
    lines.append(f"decision vectors over {' '.join(map(str, RATES))} Mbit/s (1: offload pays)")
    for op in exp.ops:
        for size in SIZES:
            vectors = "  ".join(f"{m} {grid.vector(size, m, op)}" for m in METHODS)
            penalties = " ".join(f"{grid.penalty(size, m, op):7.2f}" for m in METHODS)
            prefix = "" if op == "mul" else f"{op} "
            lines.append(f"{prefix}{size:4d}  {vectors}   cumulative penalty [json ujson raw] {penalties}")
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
    lines.append(f"{name}: {score(cells)}")
    lines += ["", "readings (where the paper's words admit two):"]
    lines += [f"{r['n']:2d} {r['reading']}" for r in rows if r["reading"]]
    return "\n".join(lines)


def score(cells: list[Cell]) -> str:
    """The held-out score as `analysis.paper_checks` states it for a run."""
    return held_out_summary(paper_checks(model_cells(cells)))


def side_by_side(results: dict[str, list[Cell]]) -> str:
    """Every statement's predicted verdict under each hypothesis, one column each, and the scores."""
    verdicts = {name: {r["n"]: r for r in judge(cells)} for name, cells in results.items()}
    first = next(iter(verdicts.values()))
    names = list(results)
    lines = [
        "== the hypotheses side by side",
        " n  use                  " + "".join(f"{n:10s}" for n in names),
    ]
    for n, row in first.items():
        marks = "".join(f"{verdicts[name][n]['holds']:10s}" for name in names)
        lines.append(f"{n:2d}  {row['use']:20s} {marks}")
    lines += [f"{name}: {score(cells)}" for name, cells in results.items()]
    return "\n".join(lines)


def summary(name: str, cells: list[Cell]) -> dict:
    """One hypothesis as the JSON output gives it: what it used, its cells, vectors, checks, score."""
    exp, grid = hypothesis(name), Grid(cells)
    return {
        "experiment": str(HYPOTHESES[name].relative_to(ROOT)),
        "dtype": exp.dtype,
        "int_range": list(exp.int_range) if exp.int_range else None,
        "codec_text": exp.codec_text,
        "client_device": exp.client_device,
        "server_device": exp.server_device,
        "cells": [c.__dict__ for c in cells],
        "vectors": {
            f"{'' if op == 'mul' else op + ' '}{s} {m}": grid.vector(s, m, op)
            for op in exp.ops
            for s in SIZES
            for m in METHODS
        },
        "checks": judge(cells),
        "score": score(cells),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hypothesis", choices=sorted(HYPOTHESES), help="one hypothesis (default: both)")
    parser.add_argument("--cells", action="store_true", help="also every cell's modelled times")
    parser.add_argument("--json", action="store_true", help="one JSON object: per hypothesis, all of it")
    args = parser.parse_args(argv)
    names = [args.hypothesis] if args.hypothesis else list(HYPOTHESES)
    results = {name: predict(paper_model(name)) for name in names}
    if args.json:
        print(json.dumps({"hypotheses": {n: summary(n, c) for n, c in results.items()}}, indent=1))
        return 0
    parts = [report(name, cells, args.cells) for name, cells in results.items()]
    print("\n\n".join(parts + ([side_by_side(results)] if len(results) > 1 else [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
