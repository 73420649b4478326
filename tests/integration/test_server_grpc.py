"""Protocol Buffers end to end against a real `python -m server --grpc-port M` on loopback, its gRPC
server in each language (`--grpc-servers python|cpp|go|java|ruby`, the `served` fixture's parameter).

A client that no one in the project wrote (the official compiler's output for `contracts/offload.proto`,
made in a temporary directory, run in a process that imports none of the project) gets correct results
over gRPC and over HTTP with `X-Codec: protobuf`, with the server's stage times from both, for every op
and dtype. Then the gRPC service's refusals and limits, each followed by a good call, every one the same
status and stages from each language; the host's CPU lock around each timed stage; and the project's own
gRPC client.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests

from benchmarks.loopback import free_port, stop
from client.__main__ import main as client_main
from client.grpc_offload import GrpcOffloadClient, ready
from client.offload import OffloadError, check_result, local, make_operands
from contracts import offload_pb2 as pb
from contracts.cpu_lock import ENV as CPU_LOCK_ENV
from contracts.errors import UserError
from contracts.processes import alive, group_alive
from contracts.protobuf_codec import EXECUTE
from contracts.stages import SERVER_LOCK_WAIT, parse_server_timing
from server.languages import LANGUAGES, program
from tests.helpers import REPO
from tests.servers import start_server

STAGES = {"decode", "compute", "encode"}

# The foreign client: only grpcio, protobuf, requests and what protoc generated next to it.
FOREIGN_CLIENT = """
import json, sys
import grpc, requests
import offload_pb2 as pb, offload_pb2_grpc as pb_grpc

target, url = sys.argv[1], sys.argv[2]
cases = json.load(sys.stdin)

def matrix(rows, dtype):
    m = pb.Matrix(rows=len(rows), cols=len(rows[0]), dtype=dtype)
    flat = [x for row in rows for x in row]
    (m.values if dtype == "float64" else m.ints).extend(flat)
    return m

def rows(m):
    flat = list(m.values) if m.dtype == "float64" else list(m.ints)
    return {"dtype": m.dtype, "rows": [flat[i * m.cols:(i + 1) * m.cols] for i in range(m.rows)]}

stub = pb_grpc.OffloadStub(grpc.insecure_channel(target))
out = []
for case in cases:
    operands = [matrix(o, case["dtype"]) for o in case["operands"]]
    reply, call = stub.Execute.with_call(pb.OpRequest(op=case["op"], operands=operands), timeout=60)
    body = pb.OpRequest(operands=operands).SerializeToString()
    resp = requests.post(url + "/v1/ops/" + case["op"], data=body, timeout=60,
                         headers={"X-Codec": "protobuf", "Content-Type": "application/x-protobuf"})
    assert resp.status_code == 200, resp.text
    out.append({
        "grpc": rows(reply.result),
        "grpc_timing": dict(call.trailing_metadata())["server-timing"],
        "http": rows(pb.OpReply.FromString(resp.content).result),
        "http_timing": resp.headers["Server-Timing"],
        "http_type": resp.headers["Content-Type"],
    })
json.dump(out, sys.stdout)
"""

A = [[1.0, 2.0], [3.0, 4.0]]
B = [[5.0, 6.0], [7.0, 8.5]]
CASES = [
    {"op": "mul", "dtype": "float64", "operands": [A, B]},
    {"op": "mul", "dtype": "int32", "operands": [[[1, -2], [3, 2**30]], [[2, 0], [0, 1]]]},
    {"op": "mul", "dtype": "int64", "operands": [[[2**40, 1]], [[3], [-5]]]},
    {"op": "inv", "dtype": "float64", "operands": [A]},
    {"op": "log", "dtype": "float64", "operands": [[[1.0, 2.718281828459045, 1e-300], [10.0, 0.5, 1e300]]]},
    {
        "op": "mul",
        "dtype": "float64",
        "operands": [[[1.0, -2.0, 0.5], [0.0, 3.0, 1.0]], [[2.0], [1.0], [4.0]]],
    },
    {"op": "mul", "dtype": "int32", "operands": [[[2**30, 2**30, 7]], [[2], [2], [-1]]]},  # wraps around
    {"op": "mul", "dtype": "int64", "operands": [[[2**62, 3]], [[4], [-1]]]},  # wraps around
    {"op": "inv", "dtype": "int32", "operands": [[[2, 1], [1, 3]]]},
    {"op": "inv", "dtype": "int64", "operands": [[[0, 1, 2], [1, 0, 3], [4, -3, 8]]]},  # a zero first pivot
    {"op": "log", "dtype": "int32", "operands": [[[1, 2, 2**31 - 1]]]},
    {"op": "log", "dtype": "int64", "operands": [[[1], [2**62]]]},
]


def expected(case: dict) -> np.ndarray:
    ops = [np.array(o, dtype=case["dtype"]) for o in case["operands"]]
    return {
        "mul": lambda: ops[0] @ ops[1],
        "inv": lambda: np.linalg.inv(ops[0]),
        "log": lambda: np.log(ops[0]),
    }[case["op"]]()


def test_a_client_compiled_from_the_schema_gets_results_and_stage_times_over_both_transports(
    served, tmp_path
):
    server, target = served
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", str(REPO / "contracts"), f"--python_out={tmp_path}"]
        + [f"--grpc_python_out={tmp_path}", str(REPO / "contracts/offload.proto")],
        check=True,
    )
    script = tmp_path / "foreign_client.py"
    script.write_text(FOREIGN_CLIENT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-E", "-s", str(script), target, server.url],  # -E: no PYTHONPATH
        input=json.dumps(CASES),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for case, got in zip(CASES, json.loads(proc.stdout), strict=True):
        want = expected(case)
        for transport in ("grpc", "http"):
            assert got[transport]["dtype"] == want.dtype.name
            np.testing.assert_allclose(np.array(got[transport]["rows"]), want, rtol=1e-12)
            timing = parse_server_timing(got[f"{transport}_timing"])
            # HTTP's work slot: its wait is the `queue` entry (gRPC serves requests on its own threads)
            stages = STAGES | ({"queue"} if transport == "http" else set())
            assert set(timing) == stages and all(v >= 0 for v in timing.values())
        assert got["http_type"] == "application/x-protobuf"
    assert np.array(json.loads(proc.stdout)[2]["grpc"]["rows"]).tolist() == [[3 * 2**40 - 5]]  # exact


def call(target: str, body: bytes) -> tuple[bytes, dict]:
    with grpc.insecure_channel(target) as channel:
        out, c = channel.unary_unary(EXECUTE).with_call(body, timeout=30)
        return out, dict(c.trailing_metadata())


def good_call(target: str) -> None:
    body = pb.OpRequest(op="log", operands=[pb.Matrix(rows=1, cols=1, values=[1.0])]).SerializeToString()
    out, _ = call(target, body)
    assert list(pb.OpReply.FromString(out).result.values) == [0.0]


def _req(op: str, *matrices: pb.Matrix) -> bytes:
    return pb.OpRequest(op=op, operands=list(matrices)).SerializeToString()


ONE = pb.Matrix(rows=1, cols=1, values=[1.0])
INT32_100 = pb.Matrix(rows=100, cols=100, dtype="int32", ints=[1] * 10_000)
BAD = [
    (b"\xff\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT, "malformed protobuf", {"decode"}),
    (_req("mul", ONE), grpc.StatusCode.INVALID_ARGUMENT, "wrong number of operands", {"decode", "compute"}),
    (_req("mul", pb.Matrix(rows=1, cols=2, values=[1.0, 2.0]), ONE), grpc.StatusCode.INVALID_ARGUMENT, "shape mismatch", {"decode", "compute"}),
    (_req("inv", pb.Matrix(rows=2, cols=2, values=[0.0] * 4)), grpc.StatusCode.INVALID_ARGUMENT, "singular matrix", {"decode", "compute"}),
    (_req("log", pb.Matrix(rows=2, cols=2, values=[1.0])), grpc.StatusCode.INVALID_ARGUMENT, "entry count mismatch", {"decode"}),
    (_req("eval", ONE), grpc.StatusCode.UNIMPLEMENTED, "unknown operation", {"decode"}),
    (_req("", ONE), grpc.StatusCode.UNIMPLEMENTED, "unknown operation", {"decode"}),
    (_req("mul", pb.Matrix(rows=40000, cols=1, values=[1.0] * 40000), pb.Matrix(rows=1, cols=40000, values=[1.0] * 40000)), grpc.StatusCode.RESOURCE_EXHAUSTED, "result too large", {"decode"}),
    (_req("log", pb.Matrix(rows=1, cols=200_000, values=[1.0] * 200_000)), grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max", set()),
    (b"\x12\x02\xff\xff", grpc.StatusCode.INVALID_ARGUMENT, "malformed protobuf", {"decode"}),  # a bad Matrix
    (_req("mul", *[ONE] * 17), grpc.StatusCode.RESOURCE_EXHAUSTED, "too many operands", {"decode"}),
    (_req("log", pb.Matrix(rows=1, cols=1, dtype="float32", values=[1.0])), grpc.StatusCode.INVALID_ARGUMENT, "bad dtype", {"decode"}),
    (_req("log", pb.Matrix(rows=0, cols=1)), grpc.StatusCode.INVALID_ARGUMENT, "bad shape", {"decode"}),
    (_req("log", pb.Matrix(rows=1, cols=1, dtype="int32", values=[1.0])), grpc.StatusCode.INVALID_ARGUMENT, "malformed body", {"decode"}),
    (_req("log", pb.Matrix(rows=1, cols=1, dtype="int32", ints=[2**40])), grpc.StatusCode.INVALID_ARGUMENT, "integer out of range", {"decode"}),
    (_req("mul", ONE, pb.Matrix(rows=1, cols=1, dtype="int64", ints=[1])), grpc.StatusCode.INVALID_ARGUMENT, "bad dtype", {"decode", "compute"}),
    (_req("inv", pb.Matrix(rows=1, cols=2, values=[1.0, 2.0])), grpc.StatusCode.INVALID_ARGUMENT, "not square", {"decode", "compute"}),
    (_req("inv", pb.Matrix(rows=1, cols=1, values=[float("inf")])), grpc.StatusCode.INVALID_ARGUMENT, "non-finite entries", {"decode", "compute"}),
    (_req("log", pb.Matrix(rows=1, cols=2, values=[1.0, 0.0])), grpc.StatusCode.INVALID_ARGUMENT, "log needs positive entries", {"decode", "compute"}),
    (_req("mul", INT32_100, INT32_100), grpc.StatusCode.RESOURCE_EXHAUSTED, "too much work", {"decode"}),
    (_req("log", pb.Matrix(rows=1, cols=150_000, dtype="int64", ints=[1] * 150_000)), grpc.StatusCode.RESOURCE_EXHAUSTED, "operands too large", {"decode"}),
]  # fmt: skip


@pytest.mark.parametrize(("body", "code", "words", "stages"), BAD, ids=[b[2] for b in BAD])
def test_bad_input_gets_its_status_and_message_and_the_server_keeps_serving(
    served, body, code, words, stages
):
    _, target = served
    with pytest.raises(grpc.RpcError) as exc:
        call(target, body)
    assert exc.value.code() == code and words in exc.value.details()
    header = dict(exc.value.trailing_metadata() or ()).get("server-timing")
    assert set(parse_server_timing(header)) == set(parse_server_timing(header, "cpu")) == stages
    good_call(target)


@pytest.mark.parametrize("language", LANGUAGES)
def test_each_timed_stage_takes_the_hosts_cpu_lock_and_reports_its_wait_outside_every_stage(
    tmp_path, monkeypatch, language
):
    lock = tmp_path / "cpu.lock"
    monkeypatch.setenv(CPU_LOCK_ENV, str(lock))
    port = free_port()
    base = port - LANGUAGES.index(language)
    server = start_server(tmp_path, "--grpc-port", str(base), "--grpc-servers", language)
    target = f"127.0.0.1:{port}"
    try:
        assert ready(target, 30.0), server.log_text()
        good_call(target)
        body = _req("log", pb.Matrix(rows=1, cols=1, values=[1.0]))
        answers: list = []
        with open(lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            waiting = threading.Thread(target=lambda: answers.append(call(target, body)))
            start = time.monotonic()
            waiting.start()
            waiting.join(1.0)
            assert waiting.is_alive()  # its decode stage waits for the lock
            fcntl.flock(held, fcntl.LOCK_UN)
        waiting.join(30)
        wall = time.monotonic() - start
        ((_, trailer),) = answers
        timing = parse_server_timing(trailer["server-timing"])
        waited = timing.pop(SERVER_LOCK_WAIT)  # reported, for communication to exclude it
        assert set(timing) == STAGES and sum(timing.values()) < wall - 0.9 and waited > 0.9
    finally:
        stop(server.proc)
        assert not group_alive(server.proc.pid), server.log_text()


def test_a_body_far_over_the_limit_is_refused_unread_and_the_server_keeps_serving(served, request):
    """8 MB against the 1 MiB limit: gRPC's receive limit refuses it before any stage. gRPC-Java's
    transport resets the stream instead (CANCELLED): the Java server refuses with a status only up
    to twice the limit (server/java/OffloadServer.java), the BAD case above."""
    _, target = served
    body = _req("log", pb.Matrix(rows=1, cols=1_000_000, values=[1.0] * 1_000_000))
    with pytest.raises(grpc.RpcError) as exc:
        call(target, body)
    if request.node.callspec.params["served"] == "java":
        assert exc.value.code() == grpc.StatusCode.CANCELLED
    else:
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than max" in exc.value.details()
    assert "server-timing" not in dict(exc.value.trailing_metadata() or ())
    good_call(target)


def test_http_protobuf_refuses_a_body_naming_another_op_and_bad_messages(served):
    server, _ = served
    for body, error in ((_req("inv", ONE), "operation mismatch"), (b"\x12\x02\xff", "malformed protobuf")):
        resp = requests.post(
            f"{server.url}/v1/ops/log", data=body, headers={"X-Codec": "protobuf"}, timeout=30
        )
        assert resp.status_code == 400 and resp.json()["error"] == error
    resp = requests.post(
        f"{server.url}/v1/ops/log", data=_req("log", ONE), headers={"X-Codec": "protobuf"}, timeout=30
    )
    assert resp.status_code == 200 and list(pb.OpReply.FromString(resp.content).result.values) == [0.0]


@pytest.mark.parametrize("op", ["mul", "inv", "log"])
@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_the_project_client_times_every_stage(served, op, dtype):
    _, target = served
    operands = make_operands(op, 60, dtype, np.random.default_rng(3))
    with GrpcOffloadClient(target, timeout=30) as client:
        result, t = client.offload(op, operands)
    check_result(result, local(op, operands)[0])
    assert min(t.t_server_decode, t.t_server_compute, t.t_server_encode, t.t_comm) > 0
    assert t.t_request == pytest.approx(t.t_comm + t.t_server_decode + t.t_server_compute + t.t_server_encode)
    assert t.t_total == pytest.approx(t.t_client_encode + t.t_request + t.t_client_decode)
    assert t.bytes_up > operands[0].size and t.bytes_down > result.size


def test_the_project_client_reports_refusals_and_a_missing_server(served):
    _, target = served
    with GrpcOffloadClient(target, timeout=30) as client, pytest.raises(OffloadError) as exc:
        client.offload("inv", [np.zeros((2, 2))])
    assert (exc.value.error, exc.value.status) == (
        "INVALID_ARGUMENT",
        grpc.StatusCode.INVALID_ARGUMENT.value[0],
    )
    with GrpcOffloadClient(f"127.0.0.1:{free_port()}", timeout=5) as client:
        with pytest.raises(UserError, match="UNAVAILABLE"):
            client.offload("log", [np.ones((1, 1))])
        with pytest.raises(UserError, match="no gRPC server answered"):
            client.wait_ready(0.5)


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_grpc_child_ends_with_the_http_master(tmp_path, sig, language):
    """SIGTERM: the master stops its child; SIGKILL: the child sees its parent gone and stops.

    (After a SIGKILL, gunicorn's own worker lingers until its next check of its parent; the
    agent's `down` stops the whole process group anyway.)"""
    port = free_port()
    base = port - LANGUAGES.index(language)
    server = start_server(tmp_path, "--grpc-port", str(base), "--grpc-servers", language)
    try:
        assert ready(f"127.0.0.1:{port}", 30.0)
        name = program(language)[-1].encode()  # server.grpc_service, or the binary's path
        (child,) = [pid for pid in server.worker_pids() if name in Path(f"/proc/{pid}/cmdline").read_bytes()]
        os.kill(server.proc.pid, sig)  # the master alone, not its process group
        server.proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child), server.log_text()
        assert not ready(f"127.0.0.1:{port}", 0.5)
    finally:
        stop(server.proc)
        assert not group_alive(server.proc.pid)


def test_the_client_cli_offloads_over_grpc(served, capsys):
    _, target = served
    argv = ["offload", "--codec", "grpc", "--grpc-target", target, "--op", "inv", "--size", "30", "--check"]
    assert client_main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["codec"], out["url"], out["check"]) == ("grpc", target, "ok") and out["t_server_compute"] > 0
    free = f"127.0.0.1:{free_port()}"
    assert (
        client_main(["offload", "--codec", "grpc", "--grpc-target", free, "--op", "log", "--size", "2"]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: gRPC call to") and "fix:" in err[0]


def test_a_server_devices_calibration_times_grpc_stages_in_the_python_grpc_server(
    served, request, monkeypatch
):
    """With the server's gRPC target, the calibration's gRPC decode, kernel and encode are the CPU
    seconds the Python gRPC server reports for real calls, one call giving a sample of each."""
    if request.node.callspec.params["served"] != "python":
        pytest.skip("a server device follows the Python gRPC server's stages only")
    from client.calibration_work import GrpcRequest, works
    from client.sampling import SelfTimed

    _, target = served
    operands = make_operands("mul", 24, "float64", np.random.default_rng(3))
    found = {(kind, codec): work for kind, codec, work, _ in works(
        "mul", 24, "float64", 1, ["grpc"], role="server", operands=operands, grpc_target=target
    )}  # fmt: skip
    # and the kernel of the long-lived HTTP stack's methods, in this process
    assert set(found) == {("kernel", "grpc"), ("decode", "grpc"), ("encode", "grpc"), ("kernel", None)}
    calls = []
    real = GrpcRequest.stages
    monkeypatch.setattr(GrpcRequest, "stages", lambda self, wanted: calls.append(1) or real(self, wanted))
    samples = {k: w.run() for k, w in found.items() if isinstance(w, SelfTimed)}
    assert len(samples) == 3 and all(0 < s < 1.0 for s in samples.values()), samples
    assert len(calls) == 1  # the three stages of one call
    with pytest.raises(RuntimeError, match="refused a mul call"):
        GrpcRequest(target, "mul", b"\xff not a message").stages(("decode",))
    # an image op's stages too, from the server's image path (issue 47 item 3)
    image = {(kind, codec): (work, n) for kind, codec, work, n in works(
        "gray", 256 * 192, "float64", 1, ["grpc"], role="server", grpc_target=target
    )}  # fmt: skip
    assert set(image) == {("kernel", "grpc"), ("decode", "grpc"), ("encode", "grpc")}
    assert image["decode", "grpc"][1] == 3 * 256 * 192 and image["encode", "grpc"][1] == 256 * 192
    assert all(0 < work.run() < 1.0 for work, _ in image.values())
