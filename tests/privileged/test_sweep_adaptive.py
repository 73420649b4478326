"""An adaptive sweep on the real embedded testbed: killed mid-run, resumed, and every cell stopped where
the stopping rule says; then the duration model against the trials it measured.

The grid (the paper's Pentium 4, scaled) has clear cells (JSON stays local by seconds, RAW 200x200
offloads) and a borderline one (RAW 300x300 at 100 Mbit/s, within a few per cent of the local time).
"""

from __future__ import annotations

import csv
import signal
from collections import defaultdict

import pytest

from analysis.stopping import MAX_REPS, PRECISE, SIGNIFICANT, Rule, stop_reason
from contracts.run import read_manifest
from testbed.devices import load_device
from testbed.estimate import model_for
from tests.helpers import rows, run_cli, start_sweep, wait_for_rows

pytestmark = pytest.mark.privileged

EXPERIMENT = """\
name: adaptive
ops: [mul]
sizes: [200, 300]
rates: [50, 100]
methods: [json, raw]
reps: {min: 3, max: 8}
warmup: 1
client_device: paper-p4
mode: scaled
validation: {enabled: false}
"""


def cells(got: list[dict]) -> dict[tuple, list[dict]]:
    out = defaultdict(list)
    for r in got:
        out[cell_of(r)[1:]].append(r)
    return {k: sorted(v, key=lambda r: int(r["rep"])) for k, v in out.items()}


def times(rs: list[dict]) -> list[float | None]:
    return [float(r["t_total"]) if r["ok"] == "true" else None for r in rs]


def test_a_killed_adaptive_sweep_resumes_where_each_cell_stopped(inventory, tmp_path):
    exp_file = tmp_path / "adaptive.yaml"
    exp_file.write_text(EXPERIMENT)
    results = tmp_path / "results"
    proc = start_sweep(inventory, str(exp_file), "--results", str(results), "--no-analyze")
    run_dir = wait_for_rows(proc, results, 14)  # round 1 (10 cells) done, round 2 under way
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    first = proc.stdout.read()
    assert "= 30..80 trials" in first and "estimated duration: " in first, first
    before = rows(run_dir)
    assert 14 <= len(before) < 80

    out = run_cli(inventory, "sweep", "--resume", str(run_dir)).stdout
    assert "sweep complete" in out and "estimated duration for the whole grid" in out
    got = rows(run_dir)
    assert got[: len(before)] == before, "resuming only appends"
    assert len({r["trial"] for r in got}) == len(got), "no trial twice"
    assert all(r["ok"] == "true" for r in got), [r["error"] for r in got if r["ok"] != "true"]

    manifest = read_manifest(run_dir / "manifest.json")
    assert manifest.status == "complete" and len(manifest.sessions) == 2
    exp = manifest.experiment
    rule = Rule.of(exp)
    by_cell = cells(got)
    for size in (200, 300):
        local = times(by_cell[(size, None, "local")])
        remote = {k: times(v) for k, v in by_cell.items() if k[0] == size and k[2] != "local"}
        assert len(remote) == 4
        # the baseline ran exactly as long as its longest-running cell
        assert len(local) == max(len(v) for v in remote.values())
        for key, samples in remote.items():
            n = len(samples)
            assert 3 <= n <= 8 and [int(r["rep"]) for r in by_cell[key]] == list(range(n))
            for k in range(3, n):  # open after each earlier round, or opened again by a longer baseline
                assert any(
                    stop_reason(samples[:k], local[:m], rule) is None for m in range(k, len(local) + 1)
                )
            # stopped after its last, against the whole baseline as the analysis decides it
            assert stop_reason(samples, local, rule) in (SIGNIFICANT, PRECISE, MAX_REPS), key
    assert len(got) < 80, "clear cells stopped before max"

    table = run_dir / "analysis" / "cells.csv"
    with open(table, newline="") as f:
        analysed = list(csv.DictReader(f))
    assert len(analysed) == 8
    for c in analysed:
        n = len(by_cell[(int(c["size"]), float(c["rate_mbps"]), c["method"])])
        assert int(c["n_trials"]) == n
        if n < 8:
            assert c["stop_reason"] == SIGNIFICANT and c["significant"] == "true", c
        else:
            assert c["stop_reason"] == MAX_REPS

    # the duration model against what the trials measured (docs/measurements.md records the figures): what a
    # trial measures (the device's time) and how long it took here (scaled: the client at host speed)
    model = model_for(exp, load_device("paper-p4"), None)
    modelled = sum(model.trial_s(*cell_of(r)) for r in got)
    measured = sum(float(r["t_total"]) for r in got)
    modelled_wall = sum(model.wall_s(*cell_of(r)) for r in got)
    measured_wall = sum(wall(r) for r in got)
    print(
        f"t_total: model {modelled:.1f} s, measured {measured:.1f} s ({measured / modelled:.2f}x); "
        f"wall: model {modelled_wall:.1f} s, measured {measured_wall:.1f} s ({measured_wall / modelled_wall:.2f}x)"
    )
    assert 0.5 < measured / modelled < 2.0
    assert 0.33 < measured_wall / modelled_wall < 3.0  # a shared 2-core host: the looser of the two


def wall(r: dict) -> float:
    """The trial's wall-clock time: its completion time with the client's stages as this host took them."""
    if r["method"] == "local":
        return float(r["wall_total"])
    stages = ("client_encode", "client_decode")
    return float(r["t_total"]) + sum(float(r[f"wall_{s}"]) - float(r[f"t_{s}"]) for s in stages)


def cell_of(r: dict) -> tuple:
    rate = float(r["rate_mbps"]) if r["rate_mbps"] else None
    return (r["op"], int(r["size"]), rate, r["method"])
