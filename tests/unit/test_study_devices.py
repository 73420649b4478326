"""The seed studies' devices: each profile holds what its written derivation computes.

The published numbers (the studies' tables and text, the CPUs' clocks) and the estimates each file
states are written here once; every figure is computed from them the way the file's comment does
it, and compared with the loaded profile within its rounding. A figure edited in a file without its
derivation, or a derivation changed without its figures, fails here.
"""

from __future__ import annotations

import pytest

from contracts.device import operand_bytes, result_bytes, work
from testbed.devices import load_device

ROUNDING = 2e-3  # the files give three significant digits

# The multi-language gRPC study (de Matos, Rego and Trinta, CLOSER 2021).
ML_GO_SPEEDUP = 39  # section 5.1: offloading to Go cut the 1000x1000 time "around 39 times"
ML_PYTHON_SPEEDUP = 15  # section 5.1: "even the process developed with Python ... around 15 times"
ML_LOCAL_UAH = {400: 23908.68, 700: 383591.64, 1000: 1173827.79}  # Table 3, Local (Android)
ML_GO_UAH_1000 = 41568.77  # Table 3, Remote (Go), 1000x1000
ML_RUNS = 33  # section 4: 33 runs per combination
# ... and the estimates its two files state
INT_BYTES = 4  # bytes per element on the wire (a Java int)
WIFI_GOODPUT_BPS = 20e6  # TCP goodput of the study's 802.11g network
NETWORK_SHARE = 0.75  # the network's share of the Go offload's time
SUPPLY_V = 3.8  # the power monitor's supply voltage

# The embedded gRPC study (Araujo, Maia, Rego and de Souza, ADVANCE 2020), Table 2 at 1000x1000.
EMB_LOCAL_PYTHON_S = 18.21  # Local (baseline), Python
EMB_DEBIAN_PYTHON_S = 12.94  # Linux Debian (the BeagleBone), Python
EMB_NETWORK_SHARE = 0.5  # estimate: the least the multi-language study's "most of the 50%" allows

# Marshalling: paper-p4's figures x clock (GHz) x per-clock factor (estimate) / the Pentium 4's 2.8 GHz.
P4_GHZ = 2.8
SINGLE_THREAD = {
    "multilang-i5-5200u": (2.7, 2.5),  # Intel: 2.7 GHz turbo
    "multilang-snapdragon600": (1.9, 1.0),  # the study's Table 2: 1.9 GHz
    "embedded-zenfone5": (1.6, 0.7),  # Intel: 1.6 GHz burst
    "embedded-beaglebone": (1.0, 0.6),  # the study's section 4: 1 GHz
}


def ml_network_s(size: int) -> float:
    """The multi-language study's estimated time on the network: two operands up, the product down."""
    return 3 * size * size * INT_BYTES * 8 / WIFI_GOODPUT_BPS


def ml_local_s(size: int) -> float:
    """The phone's local time: 39 x the Go offload at 1000, other sizes in proportion to Table 3's energy."""
    at_1000 = ML_GO_SPEEDUP * ml_network_s(1000) / NETWORK_SHARE
    return at_1000 * ML_LOCAL_UAH[size] / ML_LOCAL_UAH[1000]


def joules(uah: float) -> float:
    """One run's energy from Table 3's total over the runs, at the supply voltage."""
    return uah / ML_RUNS * 1e-6 * 3600 * SUPPLY_V


def test_the_snapdragon_phone_takes_the_studys_local_times():
    phone = load_device("multilang-snapdragon600")
    assert ml_local_s(1000) == pytest.approx(249.6)  # the file's step 1, in its own words
    for size in (400, 700, 1000):
        assert phone.kernels["mul"].at(size) == pytest.approx(
            work("mul", size) / ml_local_s(size) / 1e9, rel=ROUNDING
        )
    # the shape is the study's: the speed falls threefold from 400 to 700, then hardly at all
    assert phone.kernels["mul"].at(400) / phone.kernels["mul"].at(700) == pytest.approx(3.0, rel=0.01)
    assert (phone.cores, phone.blas_threads) == (4, 1)


def test_the_snapdragon_phone_gives_table_3s_energies_back_at_1000():
    power = load_device("multilang-snapdragon600").extra["power"]
    active = power["cpu_active_w"]["value"]
    assert active == pytest.approx(joules(ML_LOCAL_UAH[1000]) / ml_local_s(1000), rel=ROUNDING)
    go_s = ml_network_s(1000) / NETWORK_SHARE
    off_network_s = go_s - ml_network_s(1000)
    radio = (joules(ML_GO_UAH_1000) - active * off_network_s) / ml_network_s(1000)
    assert power["radio_tx_w"]["value"] == power["radio_rx_w"]["value"] == pytest.approx(radio, rel=ROUNDING)


def test_the_i5_server_takes_the_python_offloads_time_off_the_network():
    server = load_device("multilang-i5-5200u")
    python_offload_s = ml_local_s(1000) / ML_PYTHON_SPEEDUP
    compute_s = python_offload_s - ml_network_s(1000)
    assert server.kernels["mul"].at(1000) == pytest.approx(work("mul", 1000) / compute_s / 1e9, rel=ROUNDING)
    # far below the CPU's float64 peak (2 cores x 2.2 GHz x 16 flops per cycle): the study's server
    assert server.kernels["mul"].at(1000) < 2 * 2.2 * 16 / 100
    assert (server.cores, server.blas_threads) == (2, 1)


def test_the_zenfone_takes_the_studys_local_python_time():
    phone = load_device("embedded-zenfone5")
    assert phone.kernels["mul"].at(1000) == pytest.approx(
        work("mul", 1000) / EMB_LOCAL_PYTHON_S / 1e9, rel=ROUNDING
    )
    assert phone.compute_s("mul", 1000) == pytest.approx(EMB_LOCAL_PYTHON_S, rel=ROUNDING)
    assert (phone.cores, phone.blas_threads) == (2, 1)


def test_the_beaglebone_takes_the_offload_less_its_estimated_network():
    server = load_device("embedded-beaglebone")
    compute_s = EMB_DEBIAN_PYTHON_S * (1 - EMB_NETWORK_SHARE)
    assert server.kernels["mul"].at(1000) == pytest.approx(work("mul", 1000) / compute_s / 1e9, rel=ROUNDING)
    assert (server.cores, server.blas_threads) == (1, 1)
    # the study's decision holds: the phone's local time exceeds the BeagleBone's share of the offload
    assert load_device("embedded-zenfone5").compute_s("mul", 1000) > server.compute_s("mul", 1000)


@pytest.mark.parametrize("name", sorted(SINGLE_THREAD))
def test_codec_figures_are_paper_p4s_scaled_by_single_thread_speed(name):
    ghz, per_clock = SINGLE_THREAD[name]
    factor = ghz * per_clock / P4_GHZ
    reference, device = load_device("paper-p4"), load_device(name)
    assert set(device.marshalling) == set(reference.marshalling)
    for codec, speeds in reference.marshalling.items():
        for direction, speed in speeds.items():
            assert device.marshalling[codec][direction] == pytest.approx(speed * factor, rel=ROUNDING * 2.5)
    # so a codec stage takes the reference's time over the factor
    data = operand_bytes("mul", 1000) + result_bytes("mul", 1000)
    assert device.marshal_s("grpc", "encode", data) == pytest.approx(
        reference.marshal_s("grpc", "encode", data) / factor, rel=ROUNDING * 2.5
    )


@pytest.mark.parametrize("name", sorted(SINGLE_THREAD))
def test_the_studies_measured_only_multiplication(name):
    """No invented figures: an experiment with inv or log on these devices is refused by name."""
    assert load_device(name).missing(["mul", "inv", "log"], ["grpc"]) == ["kernels.inv", "kernels.log"]


# Image ops (issue 47, item 3). The multi-language study's Table 4 (local energy of the gray filter) and
# the embedded study's Table 3 (the three filters on a 216 kB image), read as each file's comment does.
ML_LOCAL_GRAY_UAH = {"0.3MP": 3796.35, "4MP": 40786.24, "8MP": 84483.09}  # Table 4, Local (Android)
EMB_IMAGE_LOCAL_PYTHON_S = 6.89  # Table 3, Local (baseline), Python
EMB_IMAGE_DEBIAN_PYTHON_S = 7.24  # Table 3, Linux Debian, Python
EMB_IMAGE = "0.11MP"  # the study's 216 kB image: this testbed's image whose PNG is 215976 bytes
EMB_PNG_BYTES = (215976, 109086 + 97885 + 65252)  # that image's PNG up, its three filtered PNGs down
# this host's PNG and raw-zlib speeds (2026-11-28), which the image codec figures scale (MB/s)
HOST_PNG = {"encode": 55.0, "decode": 195.0}
HOST_RAW_ZLIB = {"encode": 48.0, "decode": 310.0}


def test_the_snapdragon_phones_gray_takes_table_4s_local_times():
    from contracts.grid import parse_sizes

    phone = load_device("multilang-snapdragon600")
    for label, uah in ML_LOCAL_GRAY_UAH.items():
        (pixels,) = parse_sizes(label)
        local_s = ml_local_s(1000) * uah / ML_LOCAL_UAH[1000]  # time in proportion to energy (section 6)
        assert phone.compute_s("gray", pixels) == pytest.approx(local_s, rel=ROUNDING)
    # the study's finding at 0.3MP rests on it: 0.81 s locally, where the remote runs took longer
    assert phone.compute_s("gray", parse_sizes("0.3MP")[0]) == pytest.approx(0.807, rel=ROUNDING)


@pytest.mark.parametrize("name", sorted(SINGLE_THREAD))
def test_image_codec_figures_are_this_hosts_png_scaled_as_raw_zlib(name):
    device = load_device(name)
    for direction in ("encode", "decode"):
        expected = HOST_PNG[direction] * device.marshalling["raw-zlib"][direction] / HOST_RAW_ZLIB[direction]
        assert device.image_codecs["png"][direction] == pytest.approx(expected, rel=ROUNDING * 2.5)


def test_the_embedded_filters_take_table_3s_times():
    from contracts.grid import parse_sizes

    (pixels,) = parse_sizes(EMB_IMAGE)
    phone, server = load_device("embedded-zenfone5"), load_device("embedded-beaglebone")
    assert phone.compute_s("filters3", pixels) == pytest.approx(EMB_IMAGE_LOCAL_PYTHON_S, rel=ROUNDING)
    up, down = operand_bytes("filters3", pixels), result_bytes("filters3", pixels)
    codecs_s = (
        phone.work_s("encode", "filters3", pixels, "grpc", up)
        + server.work_s("decode", "filters3", pixels, "grpc", up)
        + server.work_s("encode", "filters3", pixels, "grpc", down)
        + phone.work_s("decode", "filters3", pixels, "grpc", down)
    )
    network_s = sum(EMB_PNG_BYTES) * 8 / WIFI_GOODPUT_BPS
    compute_s = EMB_IMAGE_DEBIAN_PYTHON_S - network_s - codecs_s
    assert server.compute_s("filters3", pixels) == pytest.approx(compute_s, rel=ROUNDING)
    # the study's conclusion: the Python server's offload does not beat the phone
    assert network_s + codecs_s + server.compute_s("filters3", pixels) > phone.compute_s("filters3", pixels)


@pytest.mark.parametrize("name", sorted(SINGLE_THREAD))
def test_the_studies_filters_are_only_those_they_applied(name):
    applied = {"multilang": ["gray"], "embedded": ["filters3"]}[name.split("-")[0]]
    device = load_device(name)
    assert sorted(device.filters) == applied
    others = [op for op in ("gray", "bilateral", "cartoon", "filters3") if op not in applied]
    assert device.missing(others, ["grpc"]) == [f"filters.{op}" for op in others]
