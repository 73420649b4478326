"""The C++ tagless server (server/cpp_tagless) on loopback, called with the Python codec alone.

No client of the project's: frames are built with `contracts.tagless` and written to a plain socket,
so what passes here is the wire format itself. Each of the study's methods answers correctly, with the
stage times as the trailer when asked; refusals come as error frames, and those that leave the stream in
step (an unknown method, a payload that does not decode, a count the limit refuses) keep the connection
usable, while those that do not (a status or trailer in a request, a header or payload cut short, a
payload past --max-body-mb) close it. Replies count in the body limit (GetRandNums's 4 + 4n), a
SayHello name past 1 MiB is refused, and a peer holding the whole budget (a payload trickled, a reply
never read) holds no one else up past the bounded wait: they are answered, BUSY at worst. Random
bytes and random well-formed frames never stop it. The connection limit, IPv6, SIGTERM, SIGINT and
--parent are checked too. No root needed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.loopback import free_port, stop
from contracts.processes import alive, group_alive
from contracts.tagless import (
    HEADER,
    TIMING,
    Frame,
    Status,
    Timing,
    error_message,
    read_frame,
    study,
)
from tests.helpers import REPO

SOURCE = REPO / "server/cpp_tagless"
BINARY = SOURCE / "build/tagless-server-cpp"
RAND_MAX = (1 << 31) - 1
MIB = 1 << 20
pytestmark = pytest.mark.skipif(
    not (shutil.which("g++") and shutil.which("make")),
    reason="g++ and make are needed to build server/cpp_tagless (scripts/setup.sh installs them)",
)


@dataclass
class CppServer:
    proc: subprocess.Popen
    host: str
    port: int
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def connect(self) -> Conn:
        return Conn(socket.create_connection((self.host, self.port), timeout=20))


class Conn:
    """One connection to the server: frames out, reply frames in (read with contracts.tagless)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.next_id = 1

    def send(self, data: bytes | Frame) -> None:
        self.sock.sendall(data.pack() if isinstance(data, Frame) else data)

    def reply(self) -> Frame | None:
        return read_frame(self.reader.read, 1 << 30, request=False)

    def call(self, method: str, values: tuple, flags: int = 0) -> Frame:
        m = study().method(method)
        call_id, self.next_id = self.next_id, self.next_id + 1
        self.send(Frame(call_id, m.id, m.request.encode(values), flags=flags))
        reply = self.reply()
        assert reply is not None, f"{method}: the connection was closed"
        assert (reply.call_id, reply.method_id) == (call_id, m.id)
        return reply

    def values(self, method: str, values: tuple) -> tuple:
        reply = self.call(method, values)
        assert reply.status == Status.OK, error_message(reply)
        assert reply.trailer == b""
        return study().method(method).reply.decode(reply.payload)

    def closed(self) -> bool:
        """True when the server has closed its side (nothing more to read)."""
        try:
            return self.reader.read(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def build() -> None:
    done = subprocess.run(["make", "-s", "-C", str(SOURCE)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def start(log_dir: Path, *args: str, host: str = "127.0.0.1", head: list[str] | None = None) -> CppServer:
    """The server on a free port of `host`, once it takes connections."""
    port = free_port()
    log = log_dir / f"tagless-cpp-{port}.log"
    argv = [*(head or []), str(BINARY), "--bind", host, "--port", str(port), *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = CppServer(proc, host, port, log)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return server
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                pytest.fail(f"the C++ tagless server did not start:\n{server.log_text()}")
            time.sleep(0.05)


def finish(server: CppServer) -> None:
    stop(server.proc)
    assert not group_alive(server.proc.pid), f"server processes left behind:\n{server.log_text()}"


@pytest.fixture(scope="module")
def built() -> None:
    build()


@pytest.fixture(scope="module")
def server(built, tmp_path_factory):
    """The server with its default limits (256 MiB)."""
    s = start(tmp_path_factory.mktemp("tagless-cpp"))
    try:
        yield s
    finally:
        finish(s)


@pytest.fixture(scope="module")
def small(built, tmp_path_factory):
    """A server that takes at most 1 MiB per payload, for TOO_LARGE and the fuzzing."""
    s = start(tmp_path_factory.mktemp("tagless-cpp-small"), "--max-body-mb", "1")
    try:
        yield s
    finally:
        finish(s)


@pytest.fixture
def conn(server):
    c = server.connect()
    yield c
    c.close()


# -- the methods ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tagless", "", "wörld 𝄞 €", "x" * 100_000])
def test_say_hello_greets_by_name(conn, name):
    assert conn.values("SayHello", (name,)) == (f"Hello {name}",)


def test_average_is_the_mean_as_a_double(conn):
    rng = np.random.default_rng(5)
    for n in (1, 10, 1000, 250_000):
        values = rng.integers(-(1 << 31), 1 << 31, size=n, dtype=np.int32)
        (mean,) = conn.values("Average", (values,))
        assert mean == pytest.approx(float(np.mean(values, dtype=np.float64)), rel=1e-12, abs=1e-9)
    assert conn.values("Average", ([RAND_MAX, RAND_MAX, 1],)) == ((2 * RAND_MAX + 1) / 3,)
    assert conn.values("Average", ([],)) == (0.0,)


def test_get_rand_nums_draws_n_values_in_range(conn):
    for n in (0, 1, 10, 100_000):
        (values,) = conn.values("GetRandNums", (n,))
        assert len(values) == n and values.dtype == np.int32
        if n:
            assert values.min() >= 0 and values.max() <= RAND_MAX
    (values,) = conn.values("GetRandNums", (100_000,))
    assert len(set(values.tolist())) > 99_000  # drawn, not repeated
    assert values.mean() == pytest.approx(RAND_MAX / 2, rel=0.02)


@pytest.mark.parametrize("k", [128, 256, 512, 1024, 2048, 4096, 8192])
def test_send_rcv_large_data_echoes_its_message(conn, k):
    method = study().method(f"SendRcvLargeData{k}")
    values = tuple(np.random.default_rng(k).integers(-(1 << 31), 1 << 31, size=k, dtype=np.int32).tolist())
    reply = conn.call(method.name, values)
    assert reply.status == Status.OK, error_message(reply)
    assert reply.payload == method.request.encode(values)


def test_one_connection_carries_many_calls_even_sent_at_once(conn):
    hello = study().method("SayHello")
    frames = [Frame(100 + i, hello.id, hello.request.encode((f"n{i}",))) for i in range(20)]
    conn.send(b"".join(f.pack() for f in frames))  # pipelined: the replies come back in order
    for i in range(20):
        reply = conn.reply()
        assert reply is not None and reply.call_id == 100 + i
        assert hello.reply.decode(reply.payload) == (f"Hello n{i}",)
    assert conn.values("Average", ([1, 2],)) == (1.5,)


def test_timing_comes_as_the_trailer_when_asked(conn):
    values = np.arange(2_000_000, dtype=np.int32)
    started = time.perf_counter()
    reply = conn.call("Average", (values,), flags=TIMING)
    elapsed = time.perf_counter() - started
    assert reply.status == Status.OK and reply.flags == 0
    assert len(reply.trailer) == Timing.LAYOUT.size
    t = Timing.unpack(reply.trailer)
    stages = (t.decode_wall, t.decode_cpu, t.compute_wall, t.compute_cpu, t.encode_wall, t.encode_cpu)
    assert all(0.0 <= s < 5.0 for s in stages), t
    assert t.decode_wall + t.compute_wall + t.encode_wall <= elapsed
    assert t.decode_wall > 0 and t.compute_wall > 0  # 8 MB copied, 2M values summed
    assert t.compute_cpu <= t.compute_wall * 1.5 + 0.01
    assert conn.call("SayHello", ("x",)).trailer == b""  # not asked, not sent


# -- refusals -------------------------------------------------------------------------------------


def test_an_unknown_method_is_refused_and_the_connection_goes_on(conn):
    conn.send(Frame(9, 77, b"anything", flags=TIMING))
    reply = conn.reply()
    assert (reply.call_id, reply.method_id, reply.status) == (9, 77, Status.UNKNOWN_METHOD)
    assert "no method 77" in error_message(reply) and reply.trailer == b""
    assert conn.values("SayHello", ("again",)) == ("Hello again",)


@pytest.mark.parametrize(
    ("method", "payload"),
    [
        ("SayHello", b""),
        ("SayHello", struct.pack("<I", 5) + b"abc"),
        ("SayHello", struct.pack("<I", 2) + b"\xed\xa0"),  # a surrogate's first bytes
        ("SayHello", struct.pack("<I", 1) + b"a" + b"\x00"),
        ("Average", struct.pack("<I", 0xFFFFFFFF)),
        ("GetRandNums", b"\x01\x00\x00"),
        ("SendRcvLargeData128", b"\x00" * 508),
    ],
)
def test_a_payload_that_does_not_decode_is_refused_and_the_connection_goes_on(conn, method, payload):
    m = study().method(method)
    conn.send(Frame(3, m.id, payload))
    reply = conn.reply()
    assert (reply.call_id, reply.method_id, reply.status) == (3, m.id, Status.BAD_FRAME)
    assert error_message(reply)
    assert conn.values("SayHello", ("again",)) == ("Hello again",)


def test_a_negative_count_is_refused_and_the_connection_goes_on(conn):
    reply = conn.call("GetRandNums", (-1,))
    assert reply.status == Status.BAD_FRAME and "-1" in error_message(reply)
    assert conn.values("SayHello", ("again",)) == ("Hello again",)


@pytest.mark.parametrize(
    ("frame", "status"),
    [
        (HEADER.pack(1, 1, 0, 2, 0, 0), Status.BAD_FRAME),  # a status in a request
        (HEADER.pack(1, 1, 0, 0, 0, 4) + b"abcd", Status.BAD_FRAME),  # a trailer in a request
        (HEADER.pack(1, 1, 0, 0, 5000, 0) + b"only this", Status.BAD_FRAME),  # the payload cut short
        (HEADER.pack(1, 1, 0, 0, 0, 0)[:7], Status.BAD_FRAME),  # the header cut short
        (HEADER.pack(1, 1, 0, 0, 0xFFFFFFFF, 0), Status.TOO_LARGE),
    ],
    ids=["status", "trailer", "short-payload", "short-header", "too-large"],
)
def test_a_frame_out_of_step_is_refused_then_the_connection_closed(conn, frame, status):
    conn.send(frame)
    conn.sock.shutdown(socket.SHUT_WR)  # what was sent is all there is
    reply = conn.reply()
    assert reply is not None and reply.status == status, reply
    assert (reply.call_id, reply.method_id) == (0, 0)
    assert conn.closed()


def test_the_body_limit_refuses_payloads_and_replies_past_it(small):
    conn = small.connect()
    try:
        # a reply of 4 + 4n bytes: n = (1 MiB - 4) / 4 is exactly at the limit, one more past it
        assert conn.values("GetRandNums", ((MIB - 4) // 4,))[0].size == (MIB - 4) // 4
        reply = conn.call("GetRandNums", ((MIB - 4) // 4 + 1,))
        assert reply.status == Status.TOO_LARGE and "limit" in error_message(reply)
        assert conn.values("Average", (np.ones(MIB // 4 - 1, dtype=np.int32),)) == (1.0,)  # 1 MiB payload
        hello = study().method("SayHello")
        conn.send(HEADER.pack(5, hello.id, 0, 0, MIB + 1, 0))
        reply = conn.reply()
        assert reply.status == Status.TOO_LARGE and conn.closed()
    finally:
        conn.close()
    again = small.connect()
    assert again.values("SayHello", ("after",)) == ("Hello after",)
    again.close()


def test_get_rand_nums_counts_its_reply_with_its_count(small):
    """The reply's 4-byte count is held too: 4 + 4n past the limit is refused, exactly at it answered."""
    conn = small.connect()
    try:
        for n in (MIB // 4, MIB // 4 + 1):  # 4n = MIB is at the limit, but 4 + 4n passes it by the count
            reply = conn.call("GetRandNums", (n,))
            assert reply.status == Status.TOO_LARGE and "limit" in error_message(reply)
        (values,) = conn.values("GetRandNums", ((MIB - 4) // 4,))  # 4 + 4n = MIB: at the limit
        assert values.size == (MIB - 4) // 4
        assert conn.values("SayHello", ("still",)) == ("Hello still",)  # the refusal kept it in step
    finally:
        conn.close()


def test_a_say_hello_name_past_one_mib_is_refused_and_the_connection_goes_on(built, tmp_path):
    server = start(tmp_path, "--max-body-mb", "4")  # room for the name: the cap, not the body limit, refuses
    conn = server.connect()
    try:
        reply = conn.call("SayHello", ("x" * (MIB + 1),))
        assert reply.status == Status.TOO_LARGE and str(MIB) in error_message(reply)
        name = "y" * MIB  # at the cap: answered
        assert conn.values("SayHello", (name,)) == (f"Hello {name}",)
    finally:
        conn.close()
        finish(server)


def answered_despite(server: CppServer, started: float) -> Frame:
    """A second connection's SayHello, while another holds the budget: a reply frame (OK, or BUSY once
    the bounded wait has passed) well within 35 s, and the server still up."""
    other = server.connect()
    other.sock.settimeout(45)
    try:
        hello = study().method("SayHello")
        other.send(Frame(11, hello.id, hello.request.encode(("second",))))
        reply = other.reply()
        assert reply is not None, "the second connection was closed without a reply"
        assert time.monotonic() - started < 40
        if reply.status == Status.BUSY:
            assert "try again" in error_message(reply) and other.closed()
        else:
            assert reply.status == Status.OK and hello.reply.decode(reply.payload) == ("Hello second",)
        return reply
    finally:
        other.close()


def test_a_peer_trickling_a_full_limit_payload_does_not_stall_the_others(built, tmp_path):
    server = start(tmp_path, "--max-body-mb", "1")  # its own: the budget is held for the test's length
    trickler = server.connect()
    done = threading.Event()

    def trickle() -> None:
        try:
            while not done.wait(1.0):
                trickler.send(b"\0")  # a byte a second: never idle, never whole
        except OSError:
            pass

    thread = threading.Thread(target=trickle, daemon=True)
    try:
        trickler.send(HEADER.pack(1, study().method("Average").id, 0, 0, MIB, 0) + b"\0" * 1000)
        time.sleep(0.2)  # the full limit taken by the first connection
        thread.start()
        answered_despite(server, time.monotonic())
        assert server.proc.poll() is None
    finally:
        done.set()
        thread.join(timeout=5)
        trickler.close()
        finish(server)


def test_a_peer_that_never_reads_a_full_limit_reply_does_not_stall_the_others(built, tmp_path):
    server = start(tmp_path, "--max-body-mb", "32")  # a reply larger than loopback's socket buffers
    stuck = server.connect()
    try:
        stuck.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        n = (32 * MIB - 4) // 4  # 4 + 4n: the whole limit
        m = study().method("GetRandNums")
        stuck.send(Frame(1, m.id, m.request.encode((n,))))  # and never a byte read
        time.sleep(0.5)  # its reply built and being sent
        answered_despite(server, time.monotonic())
        assert server.proc.poll() is None
    finally:
        stuck.close()
        finish(server)


def test_calls_from_many_connections_at_once_all_come_right_and_print_nothing(built, tmp_path):
    server = start(tmp_path)
    failures: list[Exception] = []

    def client(i: int) -> None:
        try:
            c = server.connect()
            for j in range(50):
                assert c.values("SayHello", (f"{i}-{j}",)) == (f"Hello {i}-{j}",)
                assert c.values("Average", ([i, j],)) == ((i + j) / 2,)
            c.close()
        except Exception as exc:  # reported by the main thread
            failures.append(exc)

    try:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert failures == []
        lines = server.log_text().splitlines()
        assert len(lines) == 1 and lines[0].startswith("[tagless-cpp] INFO tagless Study on 127.0.0.1:")
    finally:
        finish(server)


def test_at_most_64_connections_at_once(built, tmp_path):
    server = start(tmp_path)  # its own: no other test's connection still counted
    try:
        at_most_64(server)
    finally:
        finish(server)


def at_most_64(server: CppServer) -> None:
    held = [server.connect() for _ in range(64)]
    try:
        for c in held:
            assert c.values("SayHello", ("in",)) == ("Hello in",)
        extra = server.connect()  # accepted by the kernel, closed by the server
        assert extra.closed()
        extra.close()
    finally:
        for c in held:
            c.close()
    deadline = time.monotonic() + 10
    while True:  # the closed connections' threads finish on their own time
        c = server.connect()
        try:
            assert c.values("SayHello", ("back",)) == ("Hello back",)
            break
        except (AssertionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
        finally:
            c.close()


# -- fuzzing --------------------------------------------------------------------------------------

METHOD_IDS = sorted(study().methods)


def check_alive(server: CppServer) -> None:
    assert server.proc.poll() is None, server.log_text()
    c = server.connect()
    try:
        assert c.values("SayHello", ("still here",)) == ("Hello still here",)
    finally:
        c.close()


def drain(conn: Conn) -> list[Frame]:
    """Every reply until the server closes; each one a well-formed frame with a known status."""
    replies = []
    while (reply := conn.reply()) is not None:
        assert reply.status in set(Status), reply
        replies.append(reply)
    return replies


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(min_size=0, max_size=200))
def test_random_bytes_never_stop_the_server(small, data):
    conn = small.connect()
    try:
        conn.send(data)
        conn.sock.shutdown(socket.SHUT_WR)
        drain(conn)
    except OSError:  # closed with bytes it never read: the kernel resets (ECONNRESET, ENOTCONN, EPIPE)
        pass
    finally:
        conn.close()
    check_alive(small)


frames = st.builds(
    lambda call, method, flags, payload: Frame(call, method, payload, flags=flags),
    st.integers(0, 0xFFFFFFFF),
    st.one_of(st.sampled_from(METHOD_IDS), st.integers(0, 0xFFFF)),
    st.integers(0, 0xFF),
    st.one_of(
        st.binary(max_size=64), st.binary(min_size=500, max_size=600), st.sampled_from([b"", b"\0" * 512])
    ),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sent=st.lists(frames, min_size=1, max_size=4))
def test_random_well_formed_frames_are_each_answered_in_step(small, sent):
    conn = small.connect()
    try:
        hello = study().method("SayHello")
        conn.send(
            b"".join(f.pack() for f in sent) + Frame(7, hello.id, hello.request.encode(("end",))).pack()
        )
        for frame in sent:
            reply = conn.reply()
            assert reply is not None and (reply.call_id, reply.method_id) == (frame.call_id, frame.method_id)
            assert reply.status in (Status.OK, Status.BAD_FRAME, Status.UNKNOWN_METHOD, Status.TOO_LARGE)
            known = study().methods.get(frame.method_id)
            if reply.status == Status.OK:
                known.reply.decode(reply.payload)
                assert len(reply.trailer) == (Timing.LAYOUT.size if frame.flags & TIMING else 0)
            elif known is None:
                assert reply.status == Status.UNKNOWN_METHOD
        last = conn.reply()
        assert last.status == Status.OK and hello.reply.decode(last.payload) == ("Hello end",)
    finally:
        conn.close()
    check_alive(small)


# -- the process ----------------------------------------------------------------------------------


def test_ipv6_loopback(built, tmp_path):
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this host")
    s6 = start(tmp_path, host="::1")
    try:
        c = s6.connect()
        assert c.values("SayHello", ("v6",)) == ("Hello v6",)
        c.close()
    finally:
        finish(s6)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_it_at_once(built, tmp_path, sig):
    s = start(tmp_path)
    c = s.connect()
    try:
        assert c.values("SayHello", ("bye",)) == ("Hello bye",)
        s.proc.send_signal(sig)
        assert s.proc.wait(timeout=10) == 0
        assert c.closed()
    finally:
        c.close()
        finish(s)


def test_it_stops_when_its_parent_is_gone(built, tmp_path):
    """--parent PID: the server's parent exits, and the server follows within a second or two."""
    launcher = (
        "import os, subprocess, sys\n"
        "p = subprocess.Popen(sys.argv[1:] + ['--parent', str(os.getpid())], start_new_session=True,\n"
        "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(p.pid, flush=True)\n"
        "sys.stdin.readline()\n"
    )
    port = free_port()
    parent = subprocess.Popen(
        [sys.executable, "-c", launcher, str(BINARY), "--bind", "127.0.0.1", "--port", str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and alive(pid)
                time.sleep(0.05)
        assert alive(pid)
        parent.stdin.close()  # the launcher exits; the server is someone else's child now
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid)
    finally:
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)
        parent.wait(timeout=10)
