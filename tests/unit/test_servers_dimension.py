"""The gRPC server's language as a sweep dimension (issue: offload servers in other languages), without
root: the experiment's `servers`, the plan and its trial ids, the rows' `server` column (format 5), the
worker's targets, the lab's server start and health checks through the fake host, and the analysis,
whose method is the way a trial offloaded (`grpc@cpp`)."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import numpy as np
import pytest

from analysis import analyze
from analysis.load import load_run
from client.worker import TrialWorker
from contracts.errors import UserError
from contracts.run import FORMAT_VERSION, TrialRecord, TrialWriter, read_trials
from contracts.stages import offload_label, offloads
from contracts.worker_api import TrialSpec
from testbed.experiment import load_experiment, planned_trials
from testbed.overrides import override
from testbed.sweep.bookkeeping import start_run
from testbed.sweep.phases import run_sweep
from testbed.sweep.plan import plan_trials
from tests.fakes import FAKE_SWEEP, healthy_worker, link
from tests.helpers import trials_by_id


def test_only_the_grpc_method_has_servers_and_labels_name_the_non_python_ones():
    assert offloads(("json", "grpc"), ("python", "cpp")) == [
        ("json", "python"),
        ("grpc", "python"),
        ("grpc", "cpp"),
    ]
    assert [offload_label(m, s) for m, s in offloads(("grpc",), ("python", "go"))] == ["grpc", "grpc@go"]
    assert offload_label("local", "") == offload_label("local", None) == "local"


def test_servers_come_from_the_file_or_the_flag_and_need_the_grpc_method(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(
        "ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [json, grpc]\nreps: 2\nservers: [python, go]\n"
    )
    exp = load_experiment(path)
    assert exp.servers == ("python", "go")
    assert planned_trials(exp) == 2 * (1 + 3) == len(plan_trials(exp))
    assert override(exp, {"servers": "cpp"}).servers == ("cpp",)
    path.write_text("ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [json]\nreps: 2\nservers: [cpp]\n")
    with pytest.raises(
        UserError, match=r"exp.yaml:6: experiment key 'servers': servers cpp serve only the method grpc"
    ) as exc:
        load_experiment(path)
    assert "add grpc to methods" in exc.value.fix
    with pytest.raises(UserError, match="unknown server 'rust'"):
        override(exp, {"servers": "python,rust"})


def test_a_run_with_the_python_server_alone_numbers_its_trials_as_before_servers():
    exp = replace(FAKE_SWEEP, methods=("json", "grpc"))
    plan = plan_trials(exp)
    # op, size, rate, method, rep: as runs of format 4 were numbered (a resumed run keeps its ids)
    before = [(o, s, None, "local", r) for o in exp.ops for s in exp.sizes for r in range(exp.reps)]
    before += [
        (o, s, rate, m, r)
        for o in exp.ops for s in exp.sizes for rate in exp.rates_mbps for m in exp.methods for r in range(exp.reps)
    ]  # fmt: skip
    assert [(t.op, t.size, t.rate_mbps, t.method, t.rep) for t in plan] == before
    remote = [t for t in plan if t.rate_mbps is not None]
    assert {t.server for t in remote} == {"python"} and {t.server for t in plan if t.method == "local"} == {
        ""
    }
    both = plan_trials(replace(exp, servers=("python", "cpp")))
    assert len(both) == len(plan) + len(remote) // 2  # the grpc cells twice
    grpc = [(t.size, t.rate_mbps, t.server, t.rep) for t in both if t.method == "grpc"][:4]
    assert grpc == [
        (100, 10.0, "python", 0),
        (100, 10.0, "python", 1),
        (100, 10.0, "cpp", 0),
        (100, 10.0, "cpp", 1),
    ]


def test_rows_of_format_5_keep_their_server_and_older_rows_load_without_one(tmp_path):
    path = tmp_path / "trials.csv"
    writer = TrialWriter(path)
    writer.write(
        TrialRecord(op="mul", size=10, rate_mbps=10.0, method="grpc", ok=True, t_total=1.0, server="go")
    )
    writer.close()
    trials = read_trials(path)
    assert (trials.version, trials.records[0].server) == (FORMAT_VERSION, "go") and FORMAT_VERSION >= 5
    old = tmp_path / "old.csv"
    stages = "t_client_encode,t_comm,t_server_decode,t_server_compute,t_server_encode,t_client_decode"
    header = f"# offload-testbed trials format 4\nop,size,rate_mbps,method,ok,t_total,{stages}\n"
    old.write_text(header + "mul,10,10,grpc,true,1.0,,,,,,\n")
    assert read_trials(old).records[0].server is None


class FakeGrpc:
    def __init__(self, name: str) -> None:
        self.name, self.calls = name, []

    def offload(self, op, operands, expected=None):
        self.calls.append(op)
        raise RuntimeError(f"{self.name} was asked")


def test_the_worker_offloads_each_trial_to_its_servers_client():
    worker = TrialWorker("http://127.0.0.1:1", seed=1, timeout=1.0)
    worker.grpc = {"python": FakeGrpc("python"), "cpp": FakeGrpc("cpp")}
    spec = TrialSpec(trial=1, op="log", size=2, dtype="float64", method="grpc")
    assert worker.run(replace(spec, server="cpp")).error == "RuntimeError: cpp was asked"
    assert worker.run(spec).error == "RuntimeError: python was asked"  # no server: Python's
    assert "no go gRPC server" in worker.run(replace(spec, server="go")).error


def test_a_sweep_over_servers_starts_each_offloads_to_each_and_records_each(lab, tmp_path):
    exp = replace(FAKE_SWEEP, methods=("json", "grpc"), servers=("python", "cpp"), rates_mbps=(40.0,))
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-servers", exp, lab)
    client, server = lab.hosts["client"], lab.hosts["server"]
    asked = []
    client.reply("grpc.ready", lambda target, wait: asked.append(target) or True)
    link(lab, lambda rate, n: 0.99)
    client.worker(healthy_worker)
    summary = run_sweep(lab, exp, run_dir, manifest)

    assert (summary["failed"], summary["status"]) == (0, "complete")
    argv = server.args("service.start")[-1]["argv"]
    assert argv[-2:] == ["--grpc-servers", "python,cpp"]
    assert {"10.78.0.2:50051", "10.78.0.2:50052"} <= set(asked)
    (popen,) = [c[1] for c in client.calls if c[0] == "popen"]
    targets = json.loads(popen[popen.index("--grpc-targets") + 1])
    assert targets == {"python": "10.78.0.2:50051", "cpp": "10.78.0.2:50052"}
    rows = trials_by_id(run_dir).values()
    got = sorted({(r["method"], r["server"]) for r in rows})
    assert got == [("grpc", "cpp"), ("grpc", "python"), ("json", "python"), ("local", "")]
    specs = client.workers[0].specs
    assert {(s["method"], s["server"]) for s in specs if s["trial"] >= 0} >= {
        ("grpc", "cpp"),
        ("grpc", "python"),
    }
    warm = {(s["method"], s["server"]) for s in specs if s["trial"] < 0 and s["method"] != "local"}
    assert warm == {("json", "python"), ("grpc", "python"), ("grpc", "cpp")}  # each server warmed up
    assert json.loads((run_dir / "manifest.json").read_text())["experiment"]["servers"] == ["python", "cpp"]


def write_run(run_dir, servers: dict[str, float]) -> None:
    """A synthetic run: local mul at 1 s; grpc on each server, its compute taking the given seconds."""
    run_dir.mkdir()
    writer = TrialWriter(run_dir / "trials.csv")
    rng = np.random.default_rng(1)
    trial = 0
    for size in (100, 200):
        for rep in range(4):
            writer.write(TrialRecord(trial=trial, op="mul", size=size, rate_mbps=None, method="local", rep=rep,
                                     ok=True, t_total=1.0 + rng.normal(0, 0.01)))  # fmt: skip
            trial += 1
        for server, compute in servers.items():
            for rep in range(4):
                stages = dict(t_client_encode=0.05, t_comm=0.2, t_server_decode=0.02, t_server_compute=compute,
                              t_server_encode=0.02, t_client_decode=0.05)  # fmt: skip
                total = sum(stages.values()) + rng.normal(0, 0.01)
                writer.write(TrialRecord(trial=trial, op="mul", size=size, rate_mbps=10.0, method="grpc", rep=rep,
                                         ok=True, t_total=total, server=server, **stages))  # fmt: skip
                trial += 1
    writer.close()


def test_the_analysis_treats_each_server_as_a_way_to_offload_and_draws_their_stages(tmp_path):
    run_dir = tmp_path / "run"
    write_run(run_dir, {"python": 0.3, "cpp": 0.1, "go": 2.0})
    assert sorted(set(load_run(run_dir).trials["method"])) == ["grpc", "grpc@cpp", "grpc@go", "local"]
    analyze(run_dir)
    out = run_dir / "analysis"
    with open(out / "cells.csv", newline="") as f:
        cells = {(r["method"], r["size"]): r for r in csv.DictReader(f)}
    assert cells[("grpc@cpp", "100")]["offload"] == "1" and cells[("grpc@go", "100")]["offload"] == "0"
    assert (out / "servers-mul.png").is_file()
    assert "gRPC servers by language" in (out / "report.html").read_text()
