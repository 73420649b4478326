"""One request of the `cgi` stack: a fresh Python process per request, as the paper's server ran.

lighttpd (`server.lighttpd`) starts the generated script for every request; the script imports this
module (and so NumPy and the codecs) and calls `main`. The request is read per the CGI specification
(RFC 3875): REQUEST_METHOD, PATH_INFO, CONTENT_LENGTH, the headers as HTTP_* variables, the body on
stdin; the answer is a `Status:` line, headers and the body on stdout. The request itself is
`server.handler`'s, the same as the wsgi stack's: op table, codecs, limits, refusals, stages.

The process's start-up (fork and exec by lighttpd, the interpreter, its imports, up to the top of
`main`) is a stage of its own, `server_start` in `Server-Timing`: the wall time since the kernel
started the process (`/proc/self/stat`, whose start time counts in clock ticks, so the figure may
overstate by less than one tick, 10 ms at the usual 100 Hz). Its CPU time (`time.process_time`, all
threads: OpenBLAS's start its own at import, so it can exceed the wall time) goes along as
its `cpu=` parameter (as every stage's), for a server device profile to scale (`cpu_server_start`). The client counts the start-up in
communication, as the paper did (its communication is the POST time minus the probed stages).
"""

from __future__ import annotations

import fcntl
import io
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path
from typing import BinaryIO

from contracts.cpu_lock import CpuLock, hold_the_core
from contracts.limits import Limits
from contracts.short_work import REPEATS, again_while_slow
from contracts.stages import SERVER_RETIME, SERVER_START
from server import handler
from server.handler import BodyTooLarge, Reply, error_reply
from server.timing import StageClock

PROJECT_ROOT = Path(__file__).resolve().parents[1]  # what the script puts on the path
FRESH_TIMEOUT_S = 60.0  # a fresh interpreter's start-up (`fresh_start_up_s`) takes ~0.1 s
READ_CHUNK = 1 << 20
DRAIN_LIMIT = 1 << 30


class CgiHeaders(Mapping[str, str]):
    """The request's headers from the CGI environment, looked up case-insensitively like HTTP's.

    HTTP_X_CODEC is X-Codec; CONTENT_TYPE and CONTENT_LENGTH are the two headers CGI passes without
    the HTTP_ prefix.
    """

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._h: dict[str, str] = {}
        for key, value in environ.items():
            if key.startswith("HTTP_"):
                self._h[key[5:].replace("_", "-").lower()] = value
            elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                self._h[key.replace("_", "-").lower()] = value

    def __getitem__(self, key: str) -> str:
        return self._h[key.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._h)

    def __len__(self) -> int:
        return len(self._h)


def content_length(environ: Mapping[str, str]) -> int:
    """CONTENT_LENGTH (lighttpd buffers the body first, so it is always set for a body); 0 if none."""
    text = environ.get("CONTENT_LENGTH", "").strip()
    return int(text) if text.isdigit() else 0


def read_body(stdin: BinaryIO, length: int, max_body: int) -> bytes:
    """The body from stdin: exactly CONTENT_LENGTH bytes, or BodyTooLarge past `max_body`."""
    if length > max_body:
        raise BodyTooLarge()
    buf = io.BytesIO()
    while buf.tell() < length:
        chunk = stdin.read(min(READ_CHUNK, length - buf.tell()))
        if not chunk:
            break
        buf.write(chunk)
    return buf.getvalue()


def drain(stdin: BinaryIO, left: int) -> None:
    """Read what lighttpd still sends of a refused body, so its write to our stdin never fails."""
    left = min(left, DRAIN_LIMIT)
    while left > 0:
        chunk = stdin.read(min(READ_CHUNK, left))
        if not chunk:
            break
        left -= len(chunk)


@contextmanager
def file_lock(path: str | None) -> Iterator[None]:
    """Requests decode, compute and encode one at a time across processes, as the wsgi stack's lock
    does within its worker: trials never share a CPU."""
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def respond(
    environ: Mapping[str, str], stdin: BinaryIO, limits: Limits, clock: StageClock, lock: str | None = None
) -> Reply:
    """The reply to the request `environ` describes (its body on `stdin`)."""
    method = environ.get("REQUEST_METHOD", "GET").upper()
    path = environ.get("PATH_INFO", "")
    length = content_length(environ)
    if path == "/v1/health":
        if method not in ("GET", "HEAD"):
            reply = error_reply(405, "method not allowed", "GET /v1/health")
            reply.headers["Allow"] = "GET, HEAD"
            return reply
        return handler.health(limits, "cgi")
    if path.startswith("/v1/ops/") and path.count("/") == 3:
        if method != "POST":
            reply = error_reply(405, "method not allowed", "POST /v1/ops/<op>")
            reply.headers["Allow"] = "POST"
            return reply
        read = {"left": length}

        def body() -> bytes:
            data = read_body(stdin, length, limits.max_body)
            read["left"] = 0
            return data

        return handler.handle_op(
            path.rsplit("/", 1)[1],
            CgiHeaders(environ),
            body,
            limits,
            clock,
            drain=lambda: drain(stdin, read["left"]),
            one_at_a_time=file_lock(lock),
        )
    return error_reply(404, "not found", f"no {path or '/'}; POST /v1/ops/<op> or GET /v1/health")


def write_reply(out: BinaryIO, reply: Reply) -> None:
    """The CGI response: a Status line, the headers, a blank line, the body."""
    phrase = HTTPStatus(reply.status).phrase
    head = [f"Status: {reply.status} {phrase}"]
    head += [f"{k}: {v}" for k, v in reply.headers.items()]
    head.append(f"Content-Length: {len(reply.body)}")
    out.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    out.write(reply.body)
    out.flush()


def since_start() -> float:
    """Seconds since the kernel started this process (its start time is in clock ticks since boot)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
    return time.clock_gettime(time.CLOCK_BOOTTIME) - started


def start_up_cpu_s(own_s: float, expected_s: float | None = None) -> float:
    """The start-up's CPU seconds for a scaled server device: the fastest of this process's own
    (`own_s`) and `REPEATS - 1` fresh interpreters' making the same imports (`fresh_start_up_s`),
    and taken again while far above `expected_s` (`contracts.short_work.again_while_slow`).

    One start-up is one run of work that cannot be repeated inside its process, and its CPU time
    varies from process to process: 75-104 ms over the 36 cgi trials of the smoke run of 2026-11-27
    (20:09, alone on the 2-core VM; median 90.7, the calibration's mean 82.8), 73-151 ms on four
    testbeds, where it was 34 of the 57 cgi trials' stages that missed their targets. A fresh
    process's start-up is the same work, so the fastest of three is this host's speed for it, as
    a stage of milliseconds is the fastest of three runs. The calibration's requests ask for their
    stages timed again too, so its start-ups are taken the same way."""
    figure = min([own_s] + [fresh_start_up_s() for _ in range(REPEATS - 1)])
    return again_while_slow(figure, fresh_start_up_s, expected_s)


def fresh_start_up_s() -> float:
    """The CPU seconds a fresh interpreter spends on this script's start-up: the same interpreter and
    environment, the same imports (the script's, `server.lighttpd.LighttpdStack.script`), its
    `time.process_time()` at their end, as `main` reads its own."""
    code = (
        f"import sys, time\nsys.path.insert(0, {str(PROJECT_ROOT)!r})\n"
        "import contracts.cpu_lock, server.cgi\nsys.stdout.write(repr(time.process_time()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=FRESH_TIMEOUT_S,
        check=False,
        preexec_fn=hold_the_core,  # as a scaled stage runs (`contracts.cpu_lock`); one thread here
    )
    if done.returncode != 0:
        raise RuntimeError(f"a fresh start-up failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return float(done.stdout)


def main(
    max_body_mb: float = 256.0,
    environ: Mapping[str, str] | None = None,
    start_lock: tuple[CpuLock, float] | None = None,
) -> int:
    """Answer the one request of this process. `start_lock`: the replicas' CPU lock as the script
    took it before the imports, and the seconds it waited for it, which the start-up's wall time
    excludes and the `cpulock` entry reports."""
    cpu, wall = time.process_time(), since_start()  # the interpreter and every import: server_start
    lock, waited = start_lock or (CpuLock(None), 0.0)
    lock.release()  # before any stage takes the lock again (through its own descriptor)
    environ = os.environ if environ is None else environ
    clock = StageClock.asked(CgiHeaders(environ))
    clock.ms[SERVER_START] = (wall - waited) * 1000.0
    clock.cpu_ms[SERVER_START] = cpu * 1000.0
    if lock.path is not None:
        clock.wait(waited)
    if clock.retime:  # a scaled server device: the start-up's figure as its stages' (start_up_cpu_s)
        begun = time.perf_counter()
        with lock.held() as again_waited:
            clock.cpu_ms[SERVER_START] = start_up_cpu_s(cpu, clock.expected.get("start")) * 1000.0
        if lock.path is not None:
            clock.wait(again_waited)
        clock.ms[SERVER_RETIME] = (time.perf_counter() - begun - again_waited) * 1000.0
    try:
        reply = respond(
            environ, sys.stdin.buffer, Limits.from_mb(max_body_mb), clock, environ.get("OFFLOAD_LOCK")
        )
    except Exception as exc:  # a bug: the client still gets JSON; the traceback goes to lighttpd's log
        traceback.print_exc(file=sys.stderr)
        drain(sys.stdin.buffer, content_length(environ))  # whatever of the body is left unread
        reply = error_reply(500, "internal error", f"{type(exc).__name__}: {exc}", clock)
    write_reply(sys.stdout.buffer, reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
