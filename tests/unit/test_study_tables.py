"""The studies' published figures beside a run of their grids (`analysis.study_tables`)."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.study_tables import main, study_tables
from contracts.run import Experiment, Manifest, write_manifest


def study_run(tmp_path, name: str, rows: list[dict]):
    run = tmp_path / name
    (run / "analysis").mkdir(parents=True)
    exp = Experiment(name, ("mul",), (1000,), (20.0,), ("grpc",), 5, servers=("python", "go"))
    write_manifest(run / "manifest.json", Manifest(run_id=name, status="complete", experiment=exp))
    pd.DataFrame(rows).to_csv(run / "analysis" / "cells.csv", index=False)
    return run


def cell(op, size, method, mean, local, comm, e_remote=1.0, e_local=10.0) -> dict:
    return {"op": op, "size": size, "rate_mbps": 20.0, "method": method, "mean": mean, "local_mean": local,
            "t_comm_mean": comm, "energy_remote_j": e_remote, "energy_local_j": e_local}  # fmt: skip


def test_the_multilanguage_table_sets_each_case_beside_the_studys_energy_gain(tmp_path):
    run = study_run(tmp_path, "multilang-study", [
        cell("mul", 1000, "grpc", 14.0, 252.0, 1.68, 2.0, 40.0),
        cell("mul", 1000, "grpc@go", 9.0, 252.0, 1.65),
        cell("gray", 307200, "grpc", 0.41, 0.81, 0.31, 1.1, 1.57),
    ])  # fmt: skip
    lines = study_tables(run).splitlines()
    python = next(line for line in lines if line.startswith("| mul | 1000 | python |"))
    # local / remote, the network's share, the energy saved, then Table 3's gain (94.25%, from its uAh) and 15
    assert "| 252.00 | 14.00 | 1.68 | 18.0 | 12% | 95.0% | 94.3% | 15 |" in python
    assert any(line.startswith("| mul | 1000 | go |") and line.endswith("| 39 |") for line in lines)
    gray = next(line for line in lines if line.startswith("| gray | 0.3MP | python |"))
    assert "| -18.7% |" in gray  # Table 4: the remote run took more of the phone's energy than local


def test_the_embedded_table_gives_the_studys_seconds_and_a_run_of_another_grid_is_refused(tmp_path, capsys):
    run = study_run(tmp_path, "embedded-study", [cell("filters3", 110592, "grpc@cpp", 6.0, 6.87, 0.2)])
    assert "| filters3 | 0.11MP | cpp | 6.87 | 6.00 | 0.20 | 3% | 6.81 | 5.66 |" in study_tables(run)
    other = study_run(tmp_path, "smoke", [])
    assert main([str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a run of 'smoke', not of a study's grid" in err and "fix:" in err
    assert main([str(tmp_path / "nothing")]) == 2


@pytest.mark.parametrize("name", ["multilang-study", "embedded-study"])
def test_the_study_experiments_load_and_name_their_tables(name):
    from analysis.study_tables import TABLES
    from testbed.experiment import load_experiment

    assert load_experiment(f"experiments/{name}.yaml").name == name and name in TABLES
