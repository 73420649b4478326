"""The cgi server stack for real: lighttpd in the server's namespace, a fresh Python per request,
reached with the real `curl` from the client's namespace; refusals as on the wsgi stack (the Flask
app's own answers, in process); `down` leaves no lighttpd and no CGI child; a tiny sweep through it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from contracts.image_wire import decode_any
from contracts.images import apply, encode
from contracts.run import FORMAT_VERSION
from contracts.stages import parse_server_timing
from server.app import create_app
from server.handler import PID_HEADER
from testbed.backends.lab import STATE_ROOT
from tests.helpers import followed_slowdowns, rows, run_cli
from tests.image_samples import PHOTO, bomb_png, corrupt_png
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged

A = [[1.0, 2.0], [3.0, 4.0]]
B = [[5.0, 6.0], [7.0, 8.0]]
TICK = 1 / os.sysconf("SC_CLK_TCK")
MUL = json.dumps({"operands": [A, B]}).encode()


def curl(lease, path: str, *args: str, data: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """The real curl, in the client's namespace: status, headers (lower-case names) and body."""
    url = f"http://{lease.address(2)}:{lease.ports[0]}{path}"
    argv = ["ip", "netns", "exec", lease.name("client"), "curl", "-sS", "-i", "--max-time", "60", *args]
    if data is not None:
        argv += ["--data-binary", "@-"]
    out = subprocess.run([*argv, url], input=data, capture_output=True, timeout=90, check=True).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    while head.startswith(b"HTTP/1.1 100"):  # curl's Expect: 100-continue for large bodies
        head, _, body = body.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def mul(lease, codec: str = "json") -> tuple[int, dict[str, str], bytes]:
    return curl(lease, "/v1/ops/mul", "-H", f"X-Codec: {codec}", data=MUL)


def lighttpd_and_cgi(prefix: str) -> list[str]:
    """Processes of this testbed's cgi stack: lighttpd (its config) and CGI children (the script)."""
    found = subprocess.run(
        ["pgrep", "-af", f"/run/testbed/{prefix}/cgi-stack/"], capture_output=True, text=True
    )
    return found.stdout.splitlines()


def test_curl_through_the_cgi_stack_new_process_per_request_hostile_refused_down_leaves_nothing(
    inventory, lease, tmp_path
):
    run_cli(inventory, "up", "--server-stack", "cgi")
    status = json.loads(run_cli(inventory, "status", "--json").stdout)
    assert status["server_stack"] == "cgi"
    assert status["services"] == {"iperf3": True, "offload": True, "grpc": True}  # gRPC: long-lived
    assert any("lighttpd" in p for p in lighttpd_and_cgi(lease.prefix))

    code, headers, body = mul(lease)
    assert code == 200, body
    assert json.loads(body)["result"] == (np.array(A) @ np.array(B)).tolist()
    stages = parse_server_timing(headers["server-timing"])
    assert list(stages) == ["server_start", "queue", "decode", "compute", "encode"]
    assert (
        stages["server_start"] > 0
        and parse_server_timing(headers["server-timing"], "cpu")["server_start"] > 0
    )
    _, again, _ = mul(lease)
    pid = PID_HEADER.lower()
    assert headers[pid] != again[pid], "each request is a process of its own"
    # an image op (issue 47): the PNG as the body, its gray back, each stage timed in the CGI process
    code, headers, body = curl(lease, "/v1/ops/gray", "-H", "X-Codec: raw", data=encode(PHOTO))
    assert code == 200 and headers["content-type"] == "image/png", body[:200]
    assert list(parse_server_timing(headers["server-timing"])) == [
        "server_start",
        "queue",
        "decode",
        "compute",
        "encode",
    ]
    assert np.abs(decode_any(body).astype(int) - apply("gray", PHOTO)[0]).max() == 0

    wsgi = create_app().test_client()  # the wsgi stack's answers, with the testbed server's limits
    huge = tmp_path / "huge.bin"
    with open(huge, "wb") as f:  # sparse: over the 256 MiB limit without writing it
        f.truncate(257 * 2**20)
    hostile = {
        "oversized body": (["-H", "X-Codec: raw", "--data-binary", f"@{huge}"], None, b"\0" * 16),
        "unknown op": (["-H", "X-Codec: json"], "/v1/ops/nope", MUL),
        "bad codec": (["-H", "X-Codec: bogus"], None, MUL),
        "malformed matrix": (["-H", "X-Codec: json"], None, b'{"operands": [[[1, 2], [3]], [[1]]]}'),
        "image bomb": (["-H", "X-Codec: raw"], "/v1/ops/gray", bomb_png()),
        "corrupt image": (["-H", "X-Codec: raw"], "/v1/ops/gray", corrupt_png()),
        "declared too large": (
            ["-H", "X-Codec: raw", "-H", "X-Shape: 9000x9000,9000x9000", "-H", "X-Dtype: float64"],
            None,
            b"\0" * 16,
        ),
    }
    for case, (args, path, data) in hostile.items():
        path = path or "/v1/ops/mul"
        if case == "oversized body":
            code, _, body = curl(lease, path, *args)
        else:
            code, _, body = curl(lease, path, *args, data=data)
        headers = {h.split(": ", 1)[0]: h.split(": ", 1)[1] for h in args[1::2] if ": " in h}
        declared = {"CONTENT_LENGTH": str(huge.stat().st_size)} if case == "oversized body" else {}
        # the in-process app gets the oversized body's declared length, not its 257 MiB
        expected = wsgi.post(path, data=data, headers=headers, environ_overrides=declared)
        assert code == expected.status_code, (case, body)
        assert json.loads(body) == expected.get_json(), case
        assert mul(lease)[0] == 200, f"the server keeps serving after: {case}"

    run_cli(inventory, "down")
    assert lighttpd_and_cgi(lease.prefix) == []
    assert leftovers(lease.prefix) == []


def test_a_tiny_sweep_through_the_cgi_stack(inventory, lease, tmp_path):
    exp = tmp_path / "cgi.yaml"
    exp.write_text(
        "name: cgi\nops: [mul]\nsizes: [64]\nrates: [50]\nmethods: [json, raw, grpc]\nreps: 2\nwarmup: 0\n"
        "server_stack: cgi\n"
    )
    results = tmp_path / "results"
    run_cli(inventory, "sweep", str(exp), "--no-validate", "--results", str(results))
    (run_dir,) = results.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["experiment"]["server_stack"] == "cgi" and manifest["format_version"] == FORMAT_VERSION
    got = rows(run_dir)
    assert got and all(r["ok"] == "true" for r in got), [r["error"] for r in got if r["ok"] != "true"]
    for r in got:
        if r["method"] in ("json", "raw"):  # a CGI process per request
            start, comm = float(r["t_server_start"]), float(r["t_comm"])
            # inside communication (the paper's definition), to the clock tick the start is counted in
            assert 0 < start < comm + TICK
            assert float(r["cpu_server_start"]) > 0
        else:  # the local baseline, and gRPC's long-lived server
            assert r["t_server_start"] == r["cpu_server_start"] == ""
    cells = (run_dir / "analysis" / "cells.csv").read_text().splitlines()[0].split(",")
    assert {"t_server_start_mean", "t_comm_net_mean"} <= set(cells)
    assert leftovers(lease.prefix) == []  # the sweep brought the testbed up and took it down


def test_a_server_devices_start_up_is_calibrated_and_scales_each_requests(inventory, lease, tmp_path):
    """paper-i3 on the cgi stack: the server's calibration times fresh start-ups (`server_start`'s
    row), and each HTTP trial's start-up is its CPU time times that slowdown, in communication; the
    slowdown follows the server host's start-ups (the device's start-up over their recent mean)."""
    results = tmp_path / "results"
    run_cli(
        inventory, "sweep", "--ops", "mul", "--sizes", "64", "--rates", "50", "--methods", "raw,grpc",
        "--reps", "2", "--warmup", "0", "--server-stack", "cgi", "--server-device", "paper-i3",
        "--no-validate", "--no-analyze", "--keep-up", "--results", str(results), timeout=900,
    )  # fmt: skip
    # the server computes with the device's one BLAS thread (its CGI requests inherit the variables)
    (pidfile,) = (STATE_ROOT / lease.prefix / "services").glob("*-offload.pid")
    environ = Path(f"/proc/{pidfile.read_text().strip()}/environ").read_bytes().split(b"\0")
    assert b"OPENBLAS_NUM_THREADS=1" in environ and b"OMP_NUM_THREADS=1" in environ
    run_cli(inventory, "down")
    (run_dir,) = results.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (calibration,) = manifest["server_device"]["calibrations"]
    (start,) = [r for r in calibration["rows"] if r["work"] == "server_start"]
    assert start["key"] == "stack|server_start" and start["target_s"] == 0.15 and start["host_cpu_s"] > 0
    raw = sorted(
        (r for r in rows(run_dir) if r["method"] == "raw"), key=lambda r: r["started_at"]
    )  # as they ran
    slowdowns = followed_slowdowns(start, [float(r["cpu_server_start"]) for r in raw])
    for r, slowdown in zip(raw, slowdowns, strict=True):
        f = {k: float(v) for k, v in r.items() if k.startswith(("t_", "wall_", "cpu_")) and v}
        assert f["t_server_start"] == pytest.approx(f["cpu_server_start"] * slowdown)
        measured = f["wall_server_decode"] + f["wall_server_compute"] + f["wall_server_encode"]
        comm = f["t_request"] - measured - f["t_server_queue"] - f["wall_server_start"] + f["t_server_start"]
        assert f["t_comm"] == pytest.approx(comm, abs=1e-6)
    assert all(r["t_server_start"] == "" for r in rows(run_dir) if r["method"] == "grpc")  # long-lived: none
    assert leftovers(lease.prefix) == []
