"""The server as a device (scaled), without root: the Server-Timing CPU parameter, the server's kinds of
work in a calibration, the experiment's and manifest's `server_device`, and a sweep through fake hosts
that calibrates the server host and hands its slowdowns to the trial worker."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import numpy as np
import pytest

from client.calibration_work import CgiRequest, grid_works, trial_operands, works
from client.sampling import SelfTimed
from client.scaled_calibration import calibrate
from contracts.device import DeviceProfile, Grid, SpeedCurve, key, stack_key
from contracts.errors import UserError
from contracts.image_wire import peek_op
from contracts.message import encode
from contracts.run import read_manifest, write_manifest
from contracts.stages import format_server_timing, parse_server_timing
from contracts.steadiness import Steadiness
from contracts.tolerance import DeviceTolerance
from contracts.wire import body_bytes
from server.timing import StageClock
from testbed.devices import load_device
from testbed.experiment import load_experiment
from testbed.overrides import override
from testbed.run_files import ManifestFile
from testbed.sweep.bookkeeping import start_run
from testbed.sweep.device_emulation import format_calibration
from testbed.sweep.phases import run_sweep
from tests.fakes import FAKE_SWEEP, calibration_answers, healthy_worker, server_calibration
from tests.helpers import rows, saved

SERVER = "multilang-i5-5200u"  # a server profile shipped in experiments/devices


def test_server_timing_carries_each_stages_cpu_time_as_an_extension_parameter():
    header = format_server_timing({"decode": 1.5, "compute": 20.0}, {"decode": 0.007421, "compute": 39.5})
    assert header == "decode;dur=1.500000;cpu=0.007421, compute;dur=20.000000;cpu=39.500000"
    assert parse_server_timing(header) == {"decode": 0.0015, "compute": 0.02}
    # a RAW decode's 7.421 us kept to the nanosecond, not rounded to 7 us
    assert parse_server_timing(header, "cpu") == pytest.approx({"decode": 7.421e-6, "compute": 0.0395})
    # an older server (no cpu), a description, a malformed metric: durations only, nothing invented
    assert parse_server_timing('decode;desc="x";dur=2, ;;, compute;dur=abc', "cpu") == {}


def test_the_server_clock_measures_cpu_time_around_exactly_its_stage():
    clock = StageClock()
    with clock.stage("compute"):
        sum(i * i for i in range(200_000))  # CPU work
    with clock.stage("encode"):
        pass
    assert clock.cpu_ms["compute"] > 0 and set(clock.cpu_ms) == set(clock.ms) == {"compute", "encode"}
    assert ";cpu=" in clock.header()


def test_the_servers_work_is_decoding_the_request_and_encoding_the_response():
    server = works("mul", 20, "float64", 1, ["json", "grpc"], role="server")
    client = works("mul", 20, "float64", 1, ["json", "grpc"])
    assert [(k, c, n) for k, c, _, n in server] == [
        ("kernel", None, 0), ("decode", "json", 6400), ("encode", "json", 3200),
        ("decode", "grpc", 6400), ("encode", "grpc", 3200),
    ]  # fmt: skip
    assert [(k, c, n) for k, c, _, n in client][1:3] == [("encode", "json", 6400), ("decode", "json", 3200)]
    decoded = server[1][2]()  # the request's operands, as the server decodes them
    assert len(decoded) == 2 and decoded[0].shape == (20, 20)
    named, operands = server[3][2]()  # gRPC's message names its op
    assert named == "mul" and len(operands) == 2


def test_an_image_ops_work_is_its_filter_and_the_encoded_images_way_there_and_back():
    """Issue 47 item 3: an image op's calibration times what its gRPC trials time, the image's pixel
    bytes being the data each stage's target is of."""
    pixels = 256 * 192  # 0.05MP, the smallest image size
    client = works("gray", pixels, "float64", 1, ["grpc", "local"])
    server = works("gray", pixels, "float64", 1, ["grpc", "local"], role="server")
    assert [(k, c, n) for k, c, _, n in client] == [
        ("kernel", None, 0), ("encode", "grpc", 3 * pixels), ("decode", "grpc", pixels)
    ]  # fmt: skip
    assert [(k, c, n) for k, c, _, n in server] == [
        ("kernel", None, 0), ("decode", "grpc", 3 * pixels), ("encode", "grpc", pixels)
    ]  # fmt: skip
    (gray,) = client[0][2]()
    assert gray.shape == (192, 256)
    request = client[1][2]()  # an OpRequest naming its op, the image in PNG
    assert peek_op(request) == "gray" and b"\x89PNG" in request
    (back,) = client[2][2]()  # the reply's image, as the client decodes it
    assert back.shape == (192, 256)
    named, fmt, img = server[1][2]()
    assert (named, fmt, img.shape) == ("gray", "png", (192, 256, 3))
    reply, _ = server[2][2]()
    assert b"\x89PNG" in reply
    assert [k for k, *_ in works("gray", pixels, "float64", 1, ["local"])] == ["kernel"]


def test_a_grid_of_matrices_and_images_calibrates_each_op_at_its_own_sizes():
    works_of = grid_works(Grid.of(["mul", "gray"], [16, 256 * 192], ["grpc"]))
    assert sorted({(op, size) for op, size, *_ in works_of}) == [("gray", 256 * 192), ("mul", 16)]


def test_an_image_device_calibrates_on_this_host():
    device = DeviceProfile(
        "cam", {}, {}, filters={"gray": SpeedCurve(((1, 2.0),))},
        image_codecs={"png": {"encode": 5.0, "decode": 20.0}},
    )  # fmt: skip
    pixels = 256 * 192
    grid = Grid.of(["gray"], [pixels], ["grpc"])
    result = calibrate(device, grid, reps=3, tolerance=DeviceTolerance(50), budget_s=0)
    rows = {r["work"]: r for r in result.row_dicts()}
    assert set(rows) == {"kernel", "grpc encode", "grpc decode"}
    assert rows["kernel"]["target_s"] == pytest.approx(pixels / 2e6)
    assert rows["grpc encode"]["target_s"] == pytest.approx(3 * pixels / 5e6)
    assert all(r["slowdown"] > 1 for r in rows.values())  # the device is slower than this host at each


def test_a_server_calibration_reaches_its_targets_on_this_host():
    device = DeviceProfile("srv", {"mul": SpeedCurve(((1, 0.05),))}, {"raw": {"encode": 100, "decode": 50}})
    grid = Grid.of(["mul"], [64], ["raw"], role="server")
    result = calibrate(device, grid, reps=3, tolerance=DeviceTolerance(50), budget_s=0)
    assert result.role == "server"
    assert [r["work"] for r in result.row_dicts()] == ["kernel", "raw decode", "raw encode"]
    decode = next(r for r in result.row_dicts() if r["work"] == "raw decode")
    assert decode["target_s"] == pytest.approx(2 * 64 * 64 * 8 / 50e6)  # both operands, at 50 MB/s
    assert set(result.scale) == {key("kernel", "mul", 64), key("decode", "mul", 64, "raw"),
                                    key("encode", "mul", 64, "raw")}  # fmt: skip


def fake_cgi(*answers: str, count=None) -> list[str]:
    """A CGI process that reads its request and answers 200 with a `Server-Timing` of `answers`, in turn
    per request body (counted in files `count.LENGTH`; without `count`, always the first)."""
    script = (
        "import os, pathlib, sys\n"
        "assert os.environ['REQUEST_METHOD'] == 'POST' and os.environ['PATH_INFO'].startswith('/v1/ops/')\n"
        "assert len(sys.stdin.buffer.read()) == int(os.environ['CONTENT_LENGTH'])\n"
        f"answers, count = {list(answers)!r}, {None if count is None else str(count)!r}\n"
        "n = 0\n"
        "if count:\n"
        "    p = pathlib.Path(count + '.' + os.environ['CONTENT_LENGTH'])\n"
        "    n = int(p.read_text()) if p.is_file() else 0\n"
        "    p.write_text(str(n + 1))\n"
        "sys.stdout.write('Status: 200 OK\\r\\nServer-Timing: ' + answers[n % len(answers)] + '\\r\\n\\r\\n')\n"
    )
    return [sys.executable, "-c", script]


def test_cgi_stages_are_calibrated_from_what_each_request_process_reports():
    """On the cgi stack every server stage is the CPU time a fresh request process reports for it, scaled
    to the profile like any work; the start-up's row and slowdown carry the stack's key, whatever the op
    and size."""
    device = DeviceProfile(
        "srv", {"mul": SpeedCurve(((1, 0.05),))}, {"raw": {"encode": 100, "decode": 50}},
        stack={"server_start": 0.15},
    )  # fmt: skip
    child = fake_cgi(
        "server_start;dur=1;cpu=375, decode;dur=1;cpu=20, compute;dur=1;cpu=40, encode;dur=1;cpu=10"
    )
    grid = Grid.of(["mul"], [64], ["raw"], role="server", cgi_argv=child, start_up=True)
    result = calibrate(device, grid, reps=2, tolerance=DeviceTolerance(10), budget_s=0)
    host = {r["work"]: r["host_cpu_s"] for r in result.row_dicts()}
    assert host == {"raw kernel": 0.04, "raw decode": 0.02, "raw encode": 0.01, "server_start": 0.375}
    (kernel,) = [r for r in result.row_dicts() if r["work"] == "raw kernel"]
    assert kernel["key"] == key("kernel", "mul", 64, "raw")  # RAW's own requests' kernel
    assert result.scale[kernel["key"]] == pytest.approx(kernel["target_s"] / 0.04)
    (start,) = [r for r in result.row_dicts() if r["work"] == "server_start"]
    assert (start["key"], start["op"], start["size"]) == (stack_key("server_start"), "any", None)
    assert start["achieved_s"] == pytest.approx(0.15)
    assert result.scale[stack_key("server_start")] == pytest.approx(0.15 / 0.375)
    assert "server_start" in format_calibration(result)


def test_one_request_process_gives_a_sample_of_each_of_its_methods_stages(tmp_path):
    """A method's decode, kernel and encode are sampled from one request's process a round, as a trial
    reports them: 4 rounds and the first run of each work are 5 requests of RAW's body, not 15."""
    device = DeviceProfile("srv", {"mul": SpeedCurve(((1, 0.05),))}, {"raw": {"encode": 100, "decode": 50}})
    child = fake_cgi("decode;dur=1;cpu=20, compute;dur=1;cpu=40, encode;dur=1;cpu=10", count=tmp_path / "n")
    grid = Grid.of(["mul"], [64], ["raw"], role="server", cgi_argv=child)
    result = calibrate(device, grid, reps=2, tolerance=DeviceTolerance(10), budget_s=0)
    assert {r["work"]: r["samples"] for r in result.row_dicts()} == {
        "raw decode": 4,
        "raw kernel": 4,
        "raw encode": 4,
    }
    (counted,) = tmp_path.glob("n.*")
    assert counted.read_text() == "5"


def test_the_real_cgi_script_answers_the_calibrations_requests():
    """`python -m server.cgi`, as lighttpd runs it, times the stages of the request it is given: the
    stages a trial of that method reports, each with its CPU time."""
    child = (sys.executable, "-m", "server.cgi")
    server = works("mul", 48, "float64", 1, ["json", "raw", "grpc"], role="server", cgi_argv=child)
    assert [(kind, codec) for kind, codec, _, _ in server] == [
        ("kernel", "grpc"),
        ("decode", "json"),
        ("kernel", "json"),
        ("encode", "json"),
        ("decode", "raw"),
        ("kernel", "raw"),
        ("encode", "raw"),
        ("decode", "grpc"),
        ("encode", "grpc"),
    ]  # each HTTP method's kernel in its own requests, gRPC's in this process
    for _, codec, work, _ in server:
        took = work()
        if codec != "grpc":  # in a request's process: its own CPU seconds
            assert isinstance(work, SelfTimed) and 0 < took < 5
        else:  # gRPC's server lives long: timed in this process
            assert not isinstance(work, SelfTimed)
    request = CgiRequest.of(child, "mul", "json", [np.eye(3), np.eye(3)])
    assert request.environ()["HTTP_X_CODEC"] == "json" and request.cpu_s("server_start") > 0
    with pytest.raises(RuntimeError, match="no decode time"):  # a refused request names what it lacks
        replace(request, op="exec").cpu_s("decode")


def test_a_flagged_scaled_row_says_why(tmp_path):
    """The check's error is the difference of two means of alternate samples: a host whose time for the
    work alternates (here a start-up of 0.1 s, then 0.4 s, ...) misses, and the row says so."""
    device = DeviceProfile("srv", {"mul": SpeedCurve(((1, 0.05),))}, {}, stack={"server_start": 0.15})
    flip = fake_cgi(
        "server_start;dur=1;cpu=100, compute;dur=1;cpu=1", "server_start;dur=1;cpu=400, compute;dur=1;cpu=1",
        count=tmp_path / "count",
    )  # fmt: skip
    grid = Grid.of(["mul"], [32], [], role="server", cgi_argv=flip, start_up=True)
    result = calibrate(device, grid, reps=4, tolerance=DeviceTolerance(10), budget_s=0)
    (start,) = [r for r in result.row_dicts() if r["work"] == "server_start"]
    assert start["flagged"] and start["error_pct"] == pytest.approx(-75.0)  # 0.1 against 0.4
    assert start["reason"] == "this host's CPU time for it varied: two means of 4 samples each"


def test_an_experiment_names_its_server_device_and_a_bad_one_is_refused(tmp_path):
    path = tmp_path / "e.yaml"
    base = "ops: [mul]\nsizes: [400]\nrates: [10]\nmethods: [raw]\nreps: 2\n"
    path.write_text(base + f"server_device: {SERVER}\n")
    assert load_experiment(path).server_device == SERVER
    assert override(load_experiment(path), {"server_device": "paper-p4"}).server_device == "paper-p4"
    path.write_text(base + "server_device: no-such-device\n")
    with pytest.raises(UserError, match="server_device"):
        load_experiment(path)


@pytest.fixture
def server_calibrated(lab):
    """The server host answers `python -m client.calibration` for its role, with slowdowns per work."""
    return lab, server_calibration(lab.hosts["server"], SERVER)


def _server_scales(lab) -> list[dict]:
    return [json.loads(w.args[w.args.index("--server-scale") + 1]) for w in lab.hosts["client"].workers]


@pytest.mark.parametrize(
    ("recalibrate", "moved", "calibrated"),
    [(False, False, 1), (True, False, 2), (False, True, 2)],
    ids=["same-machine", "recalibrate", "another-machine"],
)
def test_a_resumed_session_uses_the_calibration_again_on_the_same_machine_only(
    server_calibrated, tmp_path, monkeypatch, recalibrate, moved, calibrated
):
    """The paper's grid takes the better part of an hour to calibrate; a session resumed on the machine
    that calibrated uses that calibration again (and says so), unless told to recalibrate or the
    machine's facts moved. The strict fake host answers each calibration it is sent."""
    from testbed.sweep import device_emulation

    lab, requests = server_calibrated
    exp = replace(FAKE_SWEEP, server_device=SERVER)
    run_dir = tmp_path / "run"
    manifest = ManifestFile.load(start_run(run_dir, "fake-reuse", exp, lab).path)
    run_sweep(lab, exp, run_dir, manifest, server_device=load_device(SERVER))
    trials = run_dir / "trials.csv"
    trials.write_text("".join(trials.read_text().splitlines(keepends=True)[:8]))  # some trials missing
    if moved:
        facts = {**device_emulation.machine(), "cpu_model": "another CPU"}
        monkeypatch.setattr(device_emulation, "machine", lambda: facts)
    manifest = ManifestFile.load(run_dir / "manifest.json")
    run_sweep(lab, exp, run_dir, manifest, server_device=load_device(SERVER), recalibrate=recalibrate)

    assert len(requests) == calibrated
    data = saved(run_dir)
    calibrations = data["server_device"]["calibrations"]
    assert len(calibrations) == calibrated
    first, second = _server_scales(lab)
    assert first == second == calibrations[0]["scale"]  # the slowdowns the worker applied, recorded
    assert calibrations[0]["machine"]["hostname"]
    resumed = data["sessions"][1]["started_at"]
    assert calibrations[0].get("reused") == ([resumed] if calibrated == 1 else None)


def test_a_sweep_with_a_server_device_calibrates_the_server_host_and_scales_its_stages(
    server_calibrated, tmp_path
):
    lab, requests = server_calibrated
    server = load_device(SERVER)

    def kernel_slow_at_200(spec: dict) -> dict:  # the server's kernel in its trials: 30% over at 200
        out = healthy_worker(spec)
        if spec["method"] != "local":
            out["t_server_compute"] = server.compute_s("mul", spec["size"]) * (
                1.3 if spec["size"] == 200 else 1
            )
        return out

    lab.hosts["client"].worker(kernel_slow_at_200)
    exp = replace(FAKE_SWEEP, server_device=SERVER)
    run_dir = tmp_path / "run"
    manifest = start_run(run_dir, "fake-srv", exp, lab)
    run_sweep(lab, exp, run_dir, manifest, server_device=load_device(SERVER))

    (request,) = requests
    assert request["grid"]["role"] == "server" and request["device"]["name"] == SERVER
    (worker,) = lab.hosts["client"].workers
    scale = json.loads(worker.args[worker.args.index("--server-scale") + 1])
    assert scale[key("kernel", "mul", 100)] == 7.0 and "--scale" not in worker.args  # the client: its host
    data = saved(run_dir)
    assert data["server_device"]["profile"]["name"] == SERVER and data["device"] is None
    assert data["server_device"]["mode"] == "scaled" and len(data["server_device"]["calibrations"]) == 1
    flagged = {(r["size"], r["method"]) for r in rows(run_dir) if r["emulation_flagged"] == "true"}
    assert flagged == {("200", "json"), ("200", "raw")}, (
        "its own kernel missed at 200: its remote trials only"
    )
    again = read_manifest(run_dir / "manifest.json")
    write_manifest(tmp_path / "copy.json", again)
    assert ManifestFile.load(tmp_path / "copy.json").manifest.server_device == again.server_device


@pytest.mark.parametrize("slow_share", [0.3, 0.0])
def test_a_host_whose_speed_was_unsteady_around_its_calibration_is_announced(
    lab, tmp_path, capsys, slow_share
):
    """The host's probes (`contracts.steadiness`) come back with the calibration, are recorded with
    it, and a host too unsteady for its stages to keep their tolerance is named before the trials."""
    probes = [0.0019] * int(100 * (1 - slow_share)) + [0.0034] * int(100 * slow_share)
    steady = encode(Steadiness.of(probes, 10))
    calibration_answers(lab.hosts["server"], SERVER, "server", 7.0, steadiness=steady)
    exp = replace(FAKE_SWEEP, server_device=SERVER)
    run_dir = tmp_path / "run"
    run_sweep(
        lab, exp, run_dir, start_run(run_dir, "fake-steady", exp, lab), server_device=load_device(SERVER)
    )
    (calibration,) = saved(run_dir)["server_device"]["calibrations"]
    assert calibration["steadiness"] == steady
    announced = "server host's speed unsteady: 30% of 100 probes" in capsys.readouterr().err
    assert announced == (slow_share > 0)


def test_the_calibration_times_the_trials_operands_in_the_trials_text():
    """An experiment of one-digit integers in the era's text calibrates on them (issue 45): the
    client's encode writes Python 3.5's separators, the cgi request's body is that text, and it asks
    for the reply in it; a grid read back from its dict (a manifest) keeps both."""
    grid = Grid.of(["mul"], [8], ["json"], "int32", 1, int_range=(0, 10), codec_text="era")
    assert Grid.from_dict(json.loads(json.dumps(grid.as_dict()))) == grid
    older = {k: v for k, v in grid.as_dict().items() if k not in ("int_range", "codec_text")}
    assert Grid.from_dict(older) == Grid.of(["mul"], [8], ["json"], "int32", 1)  # as calibrated before
    client = {kind: work for _, _, kind, _, work, _ in grid_works(grid)}
    assert b"], [" in body_bytes(client["encode"]()[0])  # Python 3.5's separators
    compact = {kind: work for _, _, kind, _, work, _ in grid_works(replace(grid, codec_text="compact"))}
    assert b", " not in body_bytes(compact["encode"]()[0])
    operands = trial_operands("mul", 8, "int32", 1, (0, 10))
    assert all(a.dtype == np.int32 and a.min() >= 0 and a.max() <= 9 for a in operands)
    request = CgiRequest.of(("true",), "mul", "json", operands, "era")
    assert b"], [" in request.body and request.headers["X-Codec-Text"] == "era"
    assert request.headers["X-Retime"] == "1"  # timed as a scaled server device's trial is
