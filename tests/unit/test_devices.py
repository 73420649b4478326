"""Device profiles: files validated with file, key and reason; targets and scaling arithmetic."""

from __future__ import annotations

import textwrap

import pytest

from client.scaled_calibration import calibrate, sampling_precision
from client.scaler import Scaler
from contracts.device import DeviceProfile, Grid, SpeedCurve, key, operand_bytes, result_bytes, work
from contracts.errors import UserError
from contracts.tolerance import DeviceTolerance
from testbed.devices import DEVICES_DIR, load_device
from testbed.experiment import load_experiment

GOOD = """\
name: tiny
cores: 2
blas_threads: 1
kernels:
  mul: {100: 2.0, 400: 0.5}
  log: 0.1
marshalling:
  raw: {encode: 500, decode: 400}
  json: {encode: 2, decode: 4}
"""


def write(tmp_path, text: str):
    path = tmp_path / "device.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_every_shipped_profile_loads_and_covers_the_papers_grid():
    paths = sorted(DEVICES_DIR.glob("*.yaml"))
    assert {"paper-p4", "multilang-snapdragon600", "embedded-beaglebone"} <= {p.stem for p in paths}
    for path in paths:
        device = load_device(path.stem)
        assert device.name == path.stem
        assert device.missing(["mul"], ["json", "ujson", "raw", "grpc"]) == []
        # where the figures come from is said in the file: a source and the derivation beside it
        assert device.source and "Derivation" in path.read_text(), path


def test_a_profile_round_trips_through_json(tmp_path):
    device = load_device(write(tmp_path, GOOD))
    again = DeviceProfile.from_dict(device.as_dict())
    assert again == device
    assert again.compute_s("mul", 400) == device.compute_s("mul", 400)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("kernels:\n  mul: 0\n", "kernels.mul': 0 is not a positive speed"),
        ("kernels:\n  mul: -1\n", "is not a positive speed"),
        ("kernels:\n  matmul: 1\n", "kernels.matmul': unknown key"),
        ("kernels:\n  mul: {0: 1}\n", "is not a matrix size"),
        ("kernels:\n  mul: fast\n", "is not a float"),
        ("marshalling:\n  pickle: {encode: 1, decode: 1}\n", "marshalling.pickle': unknown key"),
        ("marshalling:\n  raw: {encode: 1}\n", "marshalling.raw.decode': is missing"),
        ("marshalling:\n  raw: {encode: 1, decode: 1, zip: 2}\n", "unknown key"),
        ("blas_threads: 4\n", "blas_threads': must be between 1 and cores"),
        ("speed: 3\n", "'speed': unknown key"),
        ("filters:\n  blur: 1\n", "filters.blur': unknown key"),
        ("filters:\n  gray: {400: 1}\n", "is not an image size"),
        ("filters:\n  gray: {0.3MB: 1}\n", "is not an image size"),
        ("filters:\n  gray: {0.3MP: 0}\n", "is not a positive speed"),
        ("image_codecs:\n  gif: {encode: 1, decode: 1}\n", "image_codecs.gif': unknown key"),
        ("image_codecs:\n  png: {encode: 1}\n", "image_codecs.png.decode': is missing"),
    ],
)
def test_bad_profiles_name_the_file_key_and_reason(tmp_path, change, words):
    base = {"kernels": "kernels:\n  mul: 1\n", "marshalling": "marshalling:\n  raw: {encode: 1, decode: 1}\n"}
    section = change.split(":")[0]
    text = "name: bad\ncores: 2\n" + "".join(v for k, v in base.items() if k != section) + change
    path = write(tmp_path, text)
    with pytest.raises(UserError) as exc:
        load_device(path)
    assert str(path) in exc.value.message and words in exc.value.message


IMAGES = """\
filters:
  gray: {0.3MP: 0.4, 4MP: 0.5}
  filters3: 0.02
image_codecs:
  png: {encode: 10, decode: 30}
"""


def test_image_ops_have_their_own_figures_in_megapixels_per_second(tmp_path):
    """Image filters in MP/s at image sizes (held as pixel counts), PNG in MB/s of pixel data; the
    round trip to the hosts keeps them, and a profile without them is refused for image ops by name."""
    device = load_device(write(tmp_path, GOOD + IMAGES))
    assert device.filters["gray"].points == ((307200, 0.4), (3981312, 0.5))
    assert device.compute_s("gray", 307200) == pytest.approx(307200 / 0.4e6)
    assert device.compute_s("filters3", 110592) == pytest.approx(110592 / 0.02e6)
    # an image's encode and decode: its pixel bytes at PNG's speed, whatever method carries it
    up, down = operand_bytes("gray", 307200), result_bytes("gray", 307200)
    assert (up, down) == (3 * 307200, 307200)
    assert device.work_s("encode", "gray", 307200, "grpc", up) == pytest.approx(up / 10e6)
    assert device.work_s("decode", "gray", 307200, "grpc", down) == pytest.approx(down / 30e6)
    assert device.covers("kernel", "gray", "local") and not device.covers("kernel", "cartoon", "local")
    assert device.missing(["gray", "mul", "cartoon"], ["grpc", "local"]) == [
        "filters.cartoon",
        "marshalling.protobuf",
    ]
    assert DeviceProfile.from_dict(device.as_dict()) == device
    plain = load_device(write(tmp_path, GOOD))
    assert plain.missing(["gray"], ["grpc"]) == ["filters.gray", "image_codecs.png"]
    assert plain.missing(["gray"], ["local"]) == ["filters.gray"]
    # a profile of image work alone needs no matrix sections
    only = load_device(write(tmp_path, "name: cam\n" + IMAGES))
    assert only.kernels == {} and only.missing(["gray"], ["grpc", "local"]) == []
    # and a profile written from a device (`python -m client profile`) reads back the same
    from client.profile_yaml import profile_yaml

    assert load_device(write(tmp_path, profile_yaml(device))) == device


def test_an_image_trials_stages_have_targets_from_the_image_figures(tmp_path):
    from contracts.stage_targets import stage_targets

    device = load_device(write(tmp_path, GOOD + IMAGES))
    targets = stage_targets("gray", 307200, "grpc", 8, device, device)
    assert targets == pytest.approx({
        "t_client_encode": 3 * 307200 / 10e6, "t_server_decode": 3 * 307200 / 30e6,
        "t_server_compute": 307200 / 0.4e6, "t_server_encode": 307200 / 10e6,
        "t_client_decode": 307200 / 30e6,
    })  # fmt: skip
    assert stage_targets("gray", 307200, "local", 8, device, None) == {
        "t_total": pytest.approx(307200 / 0.4e6)
    }
    assert stage_targets("cartoon", 307200, "local", 8, device, None) == {}


def test_an_unknown_device_name_lists_the_known_ones():
    with pytest.raises(UserError) as exc:
        load_device("no-such-device")
    assert "paper-p4" in exc.value.fix


def test_targets_follow_the_work_and_the_speed_curve():
    curve = SpeedCurve(((100, 2.0), (400, 0.5)))
    assert curve.at(50) == 2.0 and curve.at(100) == 2.0 and curve.at(1000) == 0.5
    assert curve.at(200) == pytest.approx(1.0)  # log-log: halfway in log(size) is halfway in log(speed)
    device = DeviceProfile(
        "d", {"mul": curve, "log": SpeedCurve(((1, 0.1),))}, {"raw": {"encode": 500, "decode": 400}}
    )
    assert device.compute_s("mul", 200) == pytest.approx(2 * 200**3 / 1e9)
    assert device.compute_s("log", 1000) == pytest.approx(1000**2 / 0.1e9)
    assert work("inv", 10) == 2000 and operand_bytes("mul", 10) == 1600 and result_bytes("log", 10, 4) == 800
    assert device.marshal_s("raw", "decode", 4_000_000) == pytest.approx(0.01)
    assert device.missing(["mul", "inv"], ["raw", "json", "local"]) == ["kernels.inv", "marshalling.json"]


def test_scaler_multiplies_cpu_time_by_the_slowdown_of_its_kind_of_work():
    scaler = Scaler({key("kernel", "mul", 400): 100.0, key("encode", "mul", 400, "json"): 3.0,
                     key("decode", "mul", 400, "json"): 5.0})  # fmt: skip
    local = {"t_total": 0.02, "cpu_total": 0.01}
    scaler.local(local, "mul", 400)
    assert local == {"t_total": 1.0, "cpu_total": 0.01, "wall_total": 0.02}
    remote = {"t_client_encode": 0.3, "cpu_client_encode": 0.2, "t_request": 1.5, "t_client_decode": 0.1,
              "cpu_client_decode": 0.1, "t_total": 1.9}  # fmt: skip
    scaler.remote(remote, "mul", 400, "json")
    assert remote["t_client_encode"] == pytest.approx(0.6) and remote["wall_client_encode"] == 0.3
    assert remote["t_client_decode"] == pytest.approx(0.5) and remote["t_request"] == 1.5
    assert remote["t_total"] == pytest.approx(0.6 + 1.5 + 0.5)
    with pytest.raises(KeyError, match="no calibration for kernel|mul|800"):
        scaler.local({"t_total": 1, "cpu_total": 1}, "mul", 800)


def test_a_server_device_scales_the_servers_cpu_times_and_communication_stays_measured():
    """The server's stages: its CPU time in each times the server host's slowdown for that work (its
    decode of the request, the kernel, its encode of the response); communication is the request's
    wall time minus the server's measured wall times, never the scaled ones."""
    server_scale = {key("decode", "mul", 400, "raw"): 4.0, key("kernel", "mul", 400): 30.0,
                    key("encode", "mul", 400, "raw"): 2.0}  # fmt: skip
    remote = {"t_client_encode": 0.01, "cpu_client_encode": 0.01, "t_client_decode": 0.02,
              "cpu_client_decode": 0.02, "t_request": 1.0, "t_server_decode": 0.05, "cpu_server_decode": 0.04,
              "t_server_compute": 0.1, "cpu_server_compute": 0.2, "t_server_encode": 0.03,
              "cpu_server_encode": 0.03}  # fmt: skip
    remote["t_comm"] = 1.0 - (0.05 + 0.1 + 0.03)
    Scaler(None, server_scale).remote(remote, "mul", 400, "raw")
    assert remote["t_server_decode"] == pytest.approx(0.16) and remote["wall_server_decode"] == 0.05
    assert remote["t_server_compute"] == pytest.approx(6.0) and remote["wall_server_compute"] == 0.1
    assert remote["t_server_encode"] == pytest.approx(0.06) and remote["wall_server_encode"] == 0.03
    assert remote["t_comm"] == pytest.approx(0.82), "measured, not scaled"
    assert remote["t_client_encode"] == 0.01 and "wall_client_encode" not in remote  # the client: as its host
    assert remote["t_total"] == pytest.approx(0.01 + 0.82 + 0.16 + 6.0 + 0.06 + 0.02)
    with pytest.raises(ValueError, match="no CPU time for server_decode"):
        Scaler(None, server_scale).remote({**remote, "cpu_server_decode": None}, "mul", 400, "raw")


def test_calibration_reaches_the_targets_on_this_host():
    """The real calibration, small: every kind of work gets a slowdown that reproduces its target."""
    device = DeviceProfile(
        "d",
        {"mul": SpeedCurve(((1, 0.05),))},
        {"raw": {"encode": 100, "decode": 100}, "json": {"encode": 1, "decode": 1}},
    )
    result = calibrate(
        device, Grid.of(["mul"], [64], ["raw", "json"]), reps=3, tolerance=DeviceTolerance(50), budget_s=0
    )
    assert [r["work"] for r in result.row_dicts()] == [
        "kernel",
        "raw encode",
        "raw decode",
        "json encode",
        "json decode",
    ]
    kernel = result.row_dicts()[0]
    assert kernel["target_s"] == pytest.approx(2 * 64**3 / 0.05e9)
    assert kernel["slowdown"] == pytest.approx(kernel["target_s"] / kernel["host_cpu_s"])
    assert set(result.scale) == {"kernel|mul|64", "encode|raw|mul|64", "decode|raw|mul|64",
                                    "encode|json|mul|64", "decode|json|mul|64"}  # fmt: skip


def test_calibration_samples_each_work_within_half_of_what_its_target_allows():
    """Both parts of the tolerance: a long stage's mean to half its percent, a short one's to half
    its milliseconds (a 0.4 ms stage may miss by 0.1 ms: 25%, so 12.5%), never closer."""
    tolerance = DeviceTolerance(10.0, 0.1)
    assert sampling_precision(tolerance, 10.0) == pytest.approx(0.05)
    assert sampling_precision(tolerance, 0.002) == pytest.approx(0.05)  # 10% of 2 ms is 0.2 ms
    assert sampling_precision(tolerance, 0.0004) == pytest.approx(0.125)
    assert sampling_precision(DeviceTolerance(10.0, 0.0), 0.0004) == pytest.approx(0.05)  # the percent alone


def test_experiment_names_a_device_and_a_mode(tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text(
        "ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [raw]\nreps: 1\nclient_device: paper-p4\n"
    )
    loaded = load_experiment(exp)
    assert (loaded.client_device, loaded.mode) == ("paper-p4", "scaled")
    exp.write_text(exp.read_text() + "mode: turbo\n")
    with pytest.raises(UserError, match="mode': unknown mode 'turbo'"):
        load_experiment(exp)
    exp.write_text(exp.read_text().replace("mode: turbo\n", "client_cpu: {cpu_quota: 0.5}\n"))
    with pytest.raises(UserError, match="client_device and client_cpu both"):
        load_experiment(exp)
    exp.write_text("ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [raw]\nreps: 1\nclient_device: nope\n")
    with pytest.raises(UserError, match="client_device': no device profile named 'nope'"):
        load_experiment(exp)


def test_a_measured_profile_round_trips_into_a_profile_file(tmp_path):
    """`python -m client profile` on this machine: its file loads back as the same profile."""
    import subprocess
    import sys

    out = tmp_path / "thishost.yaml"
    subprocess.run(
        [sys.executable, "-m", "client", "profile", "--name", "thishost", "--sizes", "32,64",
         "--codecs", "raw,json", "--reps", "2", "--out", str(out)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    device = load_device(out)
    assert device.name == "thishost" and [s for s, _ in device.kernels["mul"].points] == [32, 64]
    assert set(device.marshalling) == {"raw", "json"}
    assert all(speed > 0 for c in device.marshalling.values() for speed in c.values())
    assert device.source.startswith("python -m client profile")
    # emulating this host as a device asks for no slowdown at all: the targets are this host's times
    assert device.compute_s("mul", 64) == pytest.approx(
        work("mul", 64) / (device.kernels["mul"].at(64) * 1e9)
    )
