"""The tagless transport end to end: a real `python -m server.tagless_service` on loopback, called by
the project's client (`client.tagless_call`) and by raw frames: the study's four operations, the
timing trailer, both connection policies, refusals each followed by a good call, the payload limit,
and random frames after which the server still answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.loopback import free_port, stop
from client.tagless_call import CallRefused, TaglessClient
from contracts.processes import alive
from contracts.tagless import HEADER, Frame, Status, error_message, read_frame, study
from server import tagless_service
from tests.helpers import REPO


def start(max_body_mb: float = 1.0) -> tuple[subprocess.Popen, int]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "server.tagless_service",
        "--port",
        str(port),
        "--max-body-mb",
        str(max_body_mb),
    ]
    proc = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the tagless server exited: {proc.stderr.read().decode()}") from None
            time.sleep(0.05)
    stop(proc)
    raise RuntimeError("the tagless server did not listen within 20 s")


@pytest.fixture(scope="module")
def tagless():
    proc, port = start()
    yield proc, port
    stop(proc)


def raw_call(port: int, data: bytes) -> Frame | None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        return read_frame(sock.makefile("rb").read, 1 << 24, request=False)


def test_the_four_operations_answer_as_the_study_defines_them(tagless):
    _, port = tagless
    with TaglessClient("127.0.0.1", port) as client:
        assert client.call("SayHello", ("world",)).values == ("Hello world",)
        assert client.call("Average", (np.arange(10, dtype=np.int32),)).values == (4.5,)
        (numbers,) = client.call("GetRandNums", (10000,)).values
        assert len(numbers) == 10000 and numbers.min() >= 0 and numbers.max() <= (1 << 31) - 1
        assert len(set(numbers.tolist())) > 9000  # random, not a constant
        values = tuple(np.random.default_rng(1).integers(0, 1 << 31, 8192).tolist())
        reply = client.call("SendRcvLargeData8192", values)
        assert reply.values == values
        assert reply.bytes_up == reply.bytes_down == HEADER.size + 4 * 8192


def test_the_timing_trailer_comes_when_asked_and_holds_the_stages(tagless):
    _, port = tagless
    with TaglessClient("127.0.0.1", port) as client:
        plain = client.call("Average", (np.arange(100000, dtype=np.int32),))
        timed = client.call("Average", (np.arange(100000, dtype=np.int32),), timing=True)
    assert plain.timing is None and plain.bytes_down == HEADER.size + 8
    t = timed.timing
    assert timed.bytes_down == HEADER.size + 8 + 48
    assert 0 < t.compute_wall < 1 and 0 <= t.compute_cpu < 1 and t.decode_wall >= 0 and t.encode_wall >= 0


def test_a_connection_per_call_and_a_persistent_one_answer_alike(tagless):
    _, port = tagless
    for persistent in (True, False):
        with TaglessClient("127.0.0.1", port, persistent=persistent) as client:
            assert [client.call("SayHello", (str(i),)).values[0] for i in range(3)] == [
                "Hello 0",
                "Hello 1",
                "Hello 2",
            ]
            assert (client._sock is None) != persistent


def test_refusals_keep_the_connection_or_close_it_as_its_stream_allows(tagless):
    proc, port = tagless
    hello = study().messages["Hello"].encode(("x",))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        reader = sock.makefile("rb")
        for frame, status in (
            (Frame(5, 77, b""), Status.UNKNOWN_METHOD),
            (Frame(6, 1, b"\xff\xff\xff\xff"), Status.BAD_FRAME),  # a count past the payload
            (Frame(7, 2, b""), Status.BAD_FRAME),
        ):
            sock.sendall(frame.pack())
            reply = read_frame(reader.read, 1 << 20, request=False)
            assert (reply.call_id, reply.status) == (frame.call_id, status), error_message(reply)
        sock.sendall(Frame(8, 1, hello).pack())  # the same connection still answers
        assert study().messages["Greeting"].decode(
            read_frame(reader.read, 1 << 20, request=False).payload
        ) == ("Hello x",)
        sock.sendall(Frame(9, 1, hello, status=1).pack())  # not a request: answered, then closed
        assert read_frame(reader.read, 1 << 20, request=False).status == Status.BAD_FRAME
        assert reader.read(1) == b""
    assert proc.poll() is None


def test_a_payload_past_the_limit_is_refused_before_it_is_read(tagless):
    proc, port = tagless
    head = HEADER.pack(3, 1, 0, 0, 64 << 20, 0)  # 64 MiB announced, past the 1 MiB limit; none sent
    reply = raw_call(port, head)
    assert reply.status == Status.TOO_LARGE and "past the limit" in error_message(reply)
    with TaglessClient("127.0.0.1", port) as client:
        with pytest.raises(CallRefused, match="TOO_LARGE"):
            client.call("GetRandNums", (1 << 20,))  # a 4 MiB reply, past the limit: nothing drawn
        with pytest.raises(CallRefused, match="BAD_FRAME"):
            client.call("GetRandNums", (-1,))
        assert client.call("SayHello", ("again",)).values == ("Hello again",)
    assert proc.poll() is None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda call, method, flags, payload: Frame(call, method, payload, flags).pack(),
            st.integers(0, (1 << 32) - 1),
            st.sampled_from([1, 2, 3, 128, 8192, 0, 9, 65535]),
            st.integers(0, 255),
            st.binary(max_size=600),
        ),
    )
)
def test_random_frames_never_stop_the_server(tagless, data):
    proc, port = tagless
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(1 << 16):  # whatever it answers, up to its close
            pass
    assert proc.poll() is None
    with TaglessClient("127.0.0.1", port, persistent=False) as client:
        assert client.call("SayHello", ("still",)).values == ("Hello still",)


@pytest.fixture
def impatient(monkeypatch):
    """An in-process server (limit 16 MiB) whose payload deadline is 1 s and budget wait 0.5 s."""
    monkeypatch.setattr(tagless_service, "PAYLOAD_S", 1.0)
    monkeypatch.setattr(tagless_service, "BUDGET_WAIT_S", 0.5)
    server = tagless_service.Server("127.0.0.1", 0, 16 << 20)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_peer_trickling_a_payload_holds_the_others_up_no_longer_than_the_deadlines(impatient):
    port = impatient
    with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
        slow.sendall(HEADER.pack(1, 1, 0, 0, 16 << 20, 0) + b"x")  # the whole budget, one byte of it
        time.sleep(0.1)
        with TaglessClient("127.0.0.1", port, persistent=False) as other:
            with pytest.raises(CallRefused, match="BUSY"):  # no room: answered, not held up
                other.call("SayHello", ("me",))
            time.sleep(1.2)  # the slow payload's deadline has passed: its connection is closed
            assert slow.recv(1) == b""
            assert other.call("SayHello", ("me",)).values == ("Hello me",)


def test_a_peer_that_does_not_read_its_reply_holds_it_in_the_budget_not_the_others_up(impatient):
    port = impatient
    n = (4 << 20) - 1  # a reply of 16 MiB, the whole budget, past the socket buffers
    with socket.create_connection(("127.0.0.1", port), timeout=10) as deaf:
        deaf.sendall(Frame(1, 3, study().messages["Count"].encode((n,))).pack())
        time.sleep(0.5)
        with TaglessClient("127.0.0.1", port, persistent=False) as other:
            began = time.monotonic()
            with pytest.raises(CallRefused, match="BUSY"):
                other.call("Average", (np.arange(10, dtype=np.int32),))
            assert time.monotonic() - began < 5


def test_the_server_stops_on_sigterm_and_when_its_parent_is_gone():
    proc, port = start()
    stop(proc)  # SIGTERM
    assert proc.returncode == 0
    port = free_port()
    spawn = (
        "import os, subprocess, sys, time; "
        f"c = subprocess.Popen([sys.executable, '-m', 'server.tagless_service', '--port', '{port}', "
        "'--parent', str(os.getpid())]); print(c.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", spawn], cwd=REPO, stdout=subprocess.PIPE)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child)
