"""`server_stack: wsgi|cgi` from the experiment file to the server host and back into trials.csv:
validated where it enters, started by `up` and the sweep, named by `status` and the manifest, and the
cgi stack's `server_start` stage read by the client, written, and shown by the analysis."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pandas as pd
import pytest

from analysis import analyze
from client.offload import stage_times
from client.scaler import Scaler
from contracts.device import DeviceProfile, Grid, SpeedCurve, key, stack_key
from contracts.errors import UserError
from contracts.run import TrialRecord, TrialWriter, read_manifest
from testbed.backends.offload_servers import CGI_DIR
from testbed.experiment import load_experiment
from testbed.overrides import override
from testbed.sweep.bookkeeping import start_run
from testbed.sweep.device_emulation import server_grid
from testbed.sweep.phases import run_sweep
from tests.fakes import FAKE_SWEEP, HEALTH
from tests.helpers import write_experiment

EXP = """\
name: tiny
ops: [mul]
sizes: [100]
rates: [10]
methods: [raw]
reps: 2
"""


# ------------------------------------------------------------------ the experiment
def test_the_stack_is_wsgi_unless_the_file_or_the_flag_says_cgi(tmp_path):
    assert load_experiment(write_experiment(tmp_path, EXP)).server_stack == "wsgi"
    exp = load_experiment(write_experiment(tmp_path, EXP + "server_stack: cgi\n"))
    assert exp.server_stack == "cgi" and exp.as_dict()["server_stack"] == "cgi"  # what the manifest holds
    assert override(exp, {"server_stack": "wsgi"}).server_stack == "wsgi"


def test_an_unknown_stack_is_refused_naming_the_file_line_and_key(tmp_path):
    with pytest.raises(UserError) as exc:
        load_experiment(write_experiment(tmp_path, EXP + "server_stack: apache\n"))
    assert "exp.yaml" in exc.value.message and "server_stack" in exc.value.message
    assert "cgi" in exc.value.fix
    with pytest.raises(UserError, match="--server-stack: unknown server stack 'fcgi'"):
        override(load_experiment(write_experiment(tmp_path, EXP)), {"server_stack": "fcgi"})


# ------------------------------------------------------------------ up, status, the sweep (fake hosts)
def stack_aware(lab) -> dict:
    """The server's agent keeps services (as tests.fakes.services) and the client's health check says
    the stack of the offload server last started, as /v1/health does."""
    running, now = lab.services, {"stack": None}

    def start(dir, name, argv, env=None):
        if name.endswith("-offload"):
            now["stack"] = argv[argv.index("--stack") + 1] if "--stack" in argv else "wsgi"
        running[name] = 5000 + len(running)
        return running[name]

    lab.hosts["server"].reply("service.start", start)
    answer = {"status": "ok"}
    lab.hosts["client"].on(*HEALTH, answer=lambda argv: (0, json.dumps({**answer, "stack": now["stack"]})))
    return now


def test_up_with_the_cgi_stack_probes_lighttpd_and_starts_it_in_the_state_dir(netns):
    stack_aware(netns)
    netns.server_stack = "cgi"
    netns.up()
    server = netns.hosts["server"]
    (probe,) = server.args("probe")
    assert "lighttpd" in probe["programs"]
    offload = server.args("service.start")[-1]
    assert offload["argv"][-4:] == ["--stack", "cgi", "--state-dir", str(netns.state_dir / CGI_DIR)]
    assert "--grpc-port" in offload["argv"]  # gRPC stays the long-lived server
    netns.hosts["appliance"].reply("shape.read", {})
    assert netns.status()["server_stack"] == "cgi"


def test_the_wsgi_stack_neither_probes_lighttpd_nor_passes_a_stack(netns):
    stack_aware(netns)
    netns.up()
    server = netns.hosts["server"]
    assert "lighttpd" not in server.args("probe")[0]["programs"]
    assert "--stack" not in server.args("service.start")[-1]["argv"]
    netns.hosts["appliance"].reply("shape.read", {})
    assert netns.status()["server_stack"] == "wsgi"


def test_a_server_that_runs_another_stack_than_asked_is_a_bug_and_up_is_undone(netns):
    netns.hosts["client"].on(*HEALTH, answer=(0, json.dumps({"status": "ok", "stack": "wsgi"})))
    netns.server_stack = "cgi"
    with pytest.raises(RuntimeError, match="asked for the cgi server stack, the server runs wsgi"):
        netns.up()
    assert not netns.is_up()


def test_a_sweep_restarts_a_server_that_runs_the_other_stack_and_records_its_own(lab, tmp_path):
    now = stack_aware(lab)
    lab.up()  # `testbed up`: the wsgi stack
    assert now["stack"] == "wsgi"
    exp = replace(FAKE_SWEEP, server_stack="cgi")
    run_dir = tmp_path / "run"
    summary = run_sweep(lab, exp, run_dir, start_run(run_dir, "fake-cgi", exp, lab), keep_up=True)
    assert summary["status"] == "complete" and now["stack"] == "cgi"
    assert read_manifest(run_dir / "manifest.json").experiment.server_stack == "cgi"
    offloads = [
        a["argv"] for a in lab.hosts["server"].args("service.start") if a["name"].endswith("-offload")
    ]
    assert ["--stack" in argv for argv in offloads] == [False, True]


def test_a_sweep_leaves_a_server_of_its_own_stack_running(lab, tmp_path):
    stack_aware(lab)
    lab.up()
    run_dir = tmp_path / "run"
    run_sweep(lab, FAKE_SWEEP, run_dir, start_run(run_dir, "fake-wsgi", FAKE_SWEEP, lab), keep_up=True)
    offloads = [a for a in lab.hosts["server"].args("service.start") if a["name"].endswith("-offload")]
    assert len(offloads) == 1


# ------------------------------------------------------------------ the stage, client to analysis
def test_the_client_reads_server_start_and_keeps_it_in_communication_as_the_paper_did():
    wall = (0.0, 0.5, 1.0, 3.0, 3.0, 3.25)  # encode 0.5 s, POST 2 s, decode 0.25 s
    header = "server_start;dur=300;cpu=250, decode;dur=100, compute;dur=400, encode;dur=100"
    times = stage_times(wall, (0.0, 0.5, 0.0, 0.25), header)
    assert times["t_server_start"] == pytest.approx(0.3) and times["cpu_server_start"] == pytest.approx(0.25)
    assert times["t_comm"] == pytest.approx(2.0 - 0.6)  # the POST minus the probed stages only
    wsgi = stage_times(wall, (0.0, 0.5, 0.0, 0.25), "decode;dur=100, compute;dur=400, encode;dur=100")
    assert wsgi["t_server_start"] is None and wsgi["cpu_server_start"] is None
    assert wsgi["t_comm"] == times["t_comm"]


def cgi_run(tmp_path, start: float | None) -> pd.DataFrame:
    """A two-cell run (raw at 10 Mbit/s and its baseline), analysed; its cells.csv."""
    run_dir = tmp_path / f"run-{start}"
    run_dir.mkdir()
    writer = TrialWriter(run_dir / "trials.csv")
    stages = {"t_client_encode": 0.1, "t_server_decode": 0.1, "t_server_compute": 0.2}
    stages |= {"t_server_encode": 0.1, "t_client_decode": 0.1}
    for rep, comm in enumerate((1.0, 1.2, 1.4)):
        writer.write(
            TrialRecord("mul", 400, "local", True, run_id="r", trial=rep, rep=rep, t_total=5.0 + rep)
        )
        total = comm + sum(stages.values())
        writer.write(
            TrialRecord(
                "mul", 400, "raw", True, run_id="r", trial=10 + rep, rep=rep, rate_mbps=10.0,
                t_total=total, t_comm=comm, t_server_start=start, **stages,
            )
        )  # fmt: skip
    writer.close()
    analyze(run_dir, plots=False, out=open("/dev/null", "w"))
    return pd.read_csv(run_dir / "analysis" / "cells.csv")


def test_a_cgi_runs_cells_show_the_start_up_and_communication_without_it(tmp_path):
    (cell,) = cgi_run(tmp_path, 0.25).to_dict("records")
    assert cell["t_comm_mean"] == pytest.approx(1.2)  # the paper's communication: start-up included
    assert cell["t_server_start_mean"] == pytest.approx(0.25)
    assert cell["t_comm_net_mean"] == pytest.approx(1.2 - 0.25)
    assert cell["t_comm_net_ci95"] == pytest.approx(cell["t_comm_ci95"])  # a constant start-up


def test_a_run_without_a_start_up_stage_keeps_the_tables_it_had(tmp_path):
    cells = cgi_run(tmp_path, None)
    assert not [c for c in cells.columns if "t_server_start" in c or "t_comm_net" in c]


def test_python_m_client_offload_shows_the_start_up_under_communication_only_on_the_cgi_stack():
    from client.__main__ import stage_table
    from client.offload import StageTimes

    wall = (0.0, 0.5, 1.0, 3.0, 3.0, 3.25)
    times = stage_times(wall, (0.0, 0.5, 0.0, 0.25), "server_start;dur=300, decode;dur=100")
    table = stage_table(StageTimes(**times, bytes_up=10, bytes_down=20)).splitlines()
    names = [line[:18].strip() for line in table]
    assert names.index("process start") == names.index("communication") + 1
    assert "0.300000" in table[names.index("process start")]
    wsgi = stage_times(wall, (0.0, 0.5, 0.0, 0.25), "decode;dur=100")
    assert "process start" not in stage_table(StageTimes(**wsgi, bytes_up=10, bytes_down=20))


# ------------------------------------------------------------------ a server device's start-up
def cgi_remote(start: float | None) -> dict:
    """A remote trial's measured record (server stages and start-up), as the worker has it."""
    out = {"t_client_encode": 0.01, "cpu_client_encode": 0.01, "t_client_decode": 0.02,
           "cpu_client_decode": 0.02, "t_request": 1.0, "t_server_decode": 0.05, "cpu_server_decode": 0.04,
           "t_server_compute": 0.1, "cpu_server_compute": 0.2, "t_server_encode": 0.03,
           "cpu_server_encode": 0.03, "t_server_start": start,
           "cpu_server_start": None if start is None else 0.25}  # fmt: skip
    out["t_comm"] = 1.0 - (0.05 + 0.1 + 0.03)  # the start-up inside, as the paper counted it
    return out


SERVER_SCALE = {key("decode", "mul", 400, "raw"): 1.0, key("kernel", "mul", 400): 1.0,
                key("encode", "mul", 400, "raw"): 1.0}  # fmt: skip


def test_a_server_devices_start_up_is_its_cpu_time_scaled_and_replaces_the_measured_one_in_communication():
    out = cgi_remote(0.3)
    Scaler(None, {**SERVER_SCALE, stack_key("server_start"): 2.0}).remote(out, "mul", 400, "raw")
    assert out["t_server_start"] == pytest.approx(0.25 * 2.0) and out["wall_server_start"] == 0.3
    assert out["t_comm"] == pytest.approx(0.82 - 0.3 + 0.5)
    assert out["t_total"] == pytest.approx(0.01 + out["t_comm"] + 0.04 + 0.2 + 0.03 + 0.02)


def test_without_a_start_up_figure_or_a_start_up_communication_stays_as_measured():
    for scale, start in ((SERVER_SCALE, 0.3), ({**SERVER_SCALE, stack_key("server_start"): 2.0}, None)):
        out = cgi_remote(start)
        Scaler(None, scale).remote(out, "mul", 400, "raw")
        assert out["t_comm"] == pytest.approx(0.82) and out["t_server_start"] == start
        assert "wall_server_start" not in out


def test_a_trials_server_kernel_takes_its_methods_slowdown_when_calibrated_per_method():
    """The cgi stack calibrates each method's kernel in its own requests (`kernel|raw|mul|400`); a
    long-lived server one kernel for every method (`kernel|mul|400`), which a trial then takes."""
    per_method = {**SERVER_SCALE, key("kernel", "mul", 400, "raw"): 3.0}
    for scale, factor in ((per_method, 3.0), (SERVER_SCALE, 1.0)):
        out = cgi_remote(None)
        Scaler(None, scale).remote(out, "mul", 400, "raw")
        assert out["t_server_compute"] == pytest.approx(0.2 * factor)
    other = {k: v for k, v in SERVER_SCALE.items() if k != key("kernel", "mul", 400)}
    other[key("kernel", "mul", 400, "json")] = 3.0  # another method's kernel is not this one's
    with pytest.raises(KeyError, match=re.escape("no calibration for kernel|mul|400")):
        Scaler(None, other).remote(cgi_remote(None), "mul", 400, "raw")


def test_a_start_up_without_its_cpu_time_is_a_bug_not_a_guess():
    out = {**cgi_remote(0.3), "cpu_server_start": None}
    with pytest.raises(ValueError, match="no CPU time for server_start"):
        Scaler(None, {**SERVER_SCALE, stack_key("server_start"): 2.0}).remote(out, "mul", 400, "raw")


def test_the_server_calibrates_in_request_processes_on_the_cgi_stack_and_its_start_up_with_a_figure(netns):
    profile = DeviceProfile("srv", {"mul": SpeedCurve(((1, 1.0),))}, {}, stack={"server_start": 1.5})
    cgi = replace(FAKE_SWEEP, server_stack="cgi")
    grid = server_grid(netns, profile, cgi.ops, cgi.sizes, cgi.methods, cgi=True)
    assert grid.cgi_argv[-2:] == ("-m", "server.cgi") and grid.start_up and grid.role == "server"
    wsgi = server_grid(netns, profile, ["mul"], [100], ["raw"], cgi=False)
    assert (wsgi.cgi_argv, wsgi.start_up) == ((), False)  # a long-lived server: timed in-process
    no_figure = server_grid(netns, replace(profile, stack={}), ["mul"], [100], ["raw"])
    assert no_figure.cgi_argv and not no_figure.start_up


def test_the_server_calibrates_grpc_in_its_python_grpc_server_when_the_grid_has_grpc(netns):
    """gRPC's stages are timed in the Python gRPC server's calls (`GrpcRequest`); the grid says where,
    and keeps saying it through its manifest form; a grid without gRPC names no server."""
    profile = DeviceProfile("srv", {"mul": SpeedCurve(((1, 1.0),))}, {})
    grid = server_grid(netns, profile, ["mul"], [100], ["raw", "grpc"], cgi=False)
    assert grid.grpc_target == netns.grpc_target and Grid.from_dict(grid.as_dict()) == grid
    assert server_grid(netns, profile, ["mul"], [100], ["raw"], cgi=False).grpc_target == ""
    older = {k: v for k, v in grid.as_dict().items() if k != "grpc_target"}  # a calibration before it
    assert Grid.from_dict(older).grpc_target == ""
    with pytest.raises(ValueError, match="only the server"):
        Grid.of(["mul"], [100], ["grpc"], grpc_target="10.0.0.2:50051")
