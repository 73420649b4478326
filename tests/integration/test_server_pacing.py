"""The server of several clients, for real: its work slots (`--work-slots`: requests working at once,
the others waiting in `queue`) and its pacing to a server device (`--pace`: every stage lasts the
device's time for its work), through the trial client's own stage times."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest
import requests

from benchmarks.loopback import stop
from client.offload import OffloadClient, check_result, local, make_operands
from contracts.device import DeviceProfile, SpeedCurve
from contracts.stages import parse_server_timing
from tests.helpers import REPO
from tests.servers import start_server

N = 100  # mul 100 x 100, RAW: 160 kB of operands, 80 kB of result
TARGETS = {"decode": 0.10, "compute": 0.30, "encode": 0.10}  # seconds on the slow device below
SLOW = DeviceProfile(
    name="slow-test",
    kernels={"mul": SpeedCurve(((N, 2 * N**3 / TARGETS["compute"] / 1e9),))},
    marshalling={
        "raw": {
            "decode": 2 * N * N * 8 / TARGETS["decode"] / 1e6,
            "encode": N * N * 8 / TARGETS["encode"] / 1e6,
        }
    },
)
SLACK = 0.03  # a sleep ends this late at most on a loaded 2-core machine


@pytest.fixture(scope="module")
def device_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pace") / "slow.json"
    path.write_text(json.dumps(SLOW.as_dict()))
    return path


def served(tmp_path_factory, *args: str):
    server = start_server(tmp_path_factory.mktemp("server"), *args)
    try:
        yield server
    finally:
        stop(server.proc)


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory, device_file):
    yield from served(tmp_path_factory, "--pace", str(device_file))


@pytest.fixture(scope="module")
def two_slots(tmp_path_factory, device_file):
    yield from served(tmp_path_factory, "--pace", str(device_file), "--work-slots", "2")


def offload(url: str, seed: int = 1):
    operands = make_operands("mul", N, "float64", np.random.default_rng(seed))
    with OffloadClient(url) as client:
        result, stages = client.offload("mul", operands, "raw")
    check_result(result, local("mul", operands)[0])
    return stages


def at_once(url: str, n: int) -> list:
    """`n` requests sent together; their stage times."""
    out: list = [None] * n

    def one(i: int) -> None:
        out[i] = offload(url, seed=i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_a_paced_stage_lasts_the_devices_time_and_says_what_the_host_took(one_slot):
    resp = requests.get(f"{one_slot.url}/v1/health", timeout=10).json()
    assert (resp["work_slots"], resp["pace"]) == (1, "slow-test")
    operands = make_operands("mul", N, "float64", np.random.default_rng(0))
    body = b"".join(a.tobytes() for a in operands)
    headers = {"X-Codec": "raw", "X-Dtype": "float64", "X-Shape": f"{N}x{N},{N}x{N}"}
    reply = requests.post(f"{one_slot.url}/v1/ops/mul", data=body, headers=headers, timeout=30)
    assert reply.status_code == 200, reply.text
    header = reply.headers["Server-Timing"]
    dur, host = parse_server_timing(header), parse_server_timing(header, "host")
    for stage, target in TARGETS.items():
        assert target <= dur[stage] < target + SLACK, (stage, header)
        assert host[stage] < dur[stage]  # this host is faster than the device: the rest was slept
    stages = offload(one_slot.url)
    assert stages.t_server_compute == pytest.approx(TARGETS["compute"], abs=SLACK)
    assert stages.t_server_queue < 0.05  # alone: nothing to wait for


def test_requests_beyond_the_work_slots_wait_and_their_wait_is_queue_not_communication(one_slot):
    first, second = sorted(at_once(one_slot.url, 2), key=lambda s: s.t_server_queue)
    busy = sum(TARGETS.values())
    assert first.t_server_queue < 0.05
    # the later one waited for the earlier one's stages, less the time its own body took to arrive
    assert busy - 0.15 < second.t_server_queue < busy + 0.15, (first, second)
    for s in (first, second):
        server = s.t_server_decode + s.t_server_compute + s.t_server_encode + s.t_server_queue
        assert s.t_comm == pytest.approx(s.t_request - server, abs=1e-6)
        assert s.t_comm < 0.15  # loopback: the wait is not counted as network time


def test_as_many_slots_as_requests_means_no_queue(two_slots):
    stages = at_once(two_slots.url, 2)
    assert all(s.t_server_queue < 0.05 for s in stages), stages
    assert all(s.t_server_compute == pytest.approx(TARGETS["compute"], abs=SLACK) for s in stages)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--work-slots", "0"], "--work-slots must be at least 1"),
        (["--work-slots", "8"], "below --threads"),
        (["--pace", "/nonexistent.json"], "not a device profile"),
        (["--stack", "cgi", "--state-dir", "/tmp/x", "--work-slots", "2"], "for the wsgi stack"),
    ],
)
def test_bad_work_slots_or_pace_is_one_line(args, words):
    proc = subprocess.run(
        [sys.executable, "-m", "server", "--dry-run", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr
