"""Offloading one matrix operation to the server, timed stage by stage as in the paper's Fig. 3.

A remote trial is: client encode -> HTTP request (upload, server decode/compute/encode, download)
-> client decode. The server reports its three stages in `Server-Timing`; communication is what is
left of the request time, because it cannot be measured directly. The codec objects are the
server's too (`contracts.codecs`), so both ends marshal with exactly the same code.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import requests
import urllib3

from client.device_cores import Pacer
from client.transfer import post_parts, written
from contracts.codecs import CODEC_TEXT_HEADER, CODECS, Codec, CodecError, UnknownCodec, get_codec
from contracts.cpu_lock import CpuLock
from contracts.errors import UserError
from contracts.operands import FIX, MUL_INTS, IntRange, check_int_range, draw
from contracts.ops import OPS, OpError, UnknownOp, execute
from contracts.short_work import KERNEL, NOTHING, Expected, cpu_clock, per_run_cpu_s
from contracts.stages import (
    CODEC_TEXTS,
    COMPACT,
    DTYPES,
    RETIME_HEADER,
    SERVER_LOCK_WAIT,
    SERVER_QUEUE,
    SERVER_RETIME,
    SERVER_STAGES,
    SERVER_START,
    parse_server_timing,
    retime_value,
)
from contracts.wire import body_bytes

# replicas on one host: every timed client stage holds the host's CPU lock (its waits count in no stage)
CPU_LOCK = CpuLock.from_env()
CLOSE = {"Connection": "close"}  # the server closes after the response; urllib3 then opens anew


@dataclass
class StageTimes:
    """One remote trial, in seconds and bytes; the field names are the sweep's trials.csv columns."""

    t_client_encode: float
    t_request: float  # the full HTTP round trip: send the body, server work, receive the body
    t_server_decode: float
    t_server_compute: float
    t_server_encode: float
    t_client_decode: float
    t_comm: float  # t_request - server stages: inferred, as in the paper's Fig. 3
    t_total: float  # client encode + request + client decode: the remote completion time
    bytes_up: int
    bytes_down: int
    # CPU seconds of this process in the client's two stages (what `scaled` device emulation scales)
    cpu_client_encode: float = 0.0
    cpu_client_decode: float = 0.0
    # CPU seconds of the server in its stages, as it reported them (what a server device scales)
    cpu_server_decode: float | None = None
    cpu_server_compute: float | None = None
    cpu_server_encode: float | None = None
    # the cgi stack's process start-up (inside t_request, counted in t_comm), wall and CPU seconds;
    # None on the wsgi stack
    t_server_start: float | None = None
    cpu_server_start: float | None = None
    # the wait for one of the server's work slots once the body had arrived (not communication)
    t_server_queue: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class OffloadError(Exception):
    """The server answered with an error status; `error` and `detail` are its JSON body."""

    def __init__(self, status: int, error: str, detail: str = "") -> None:
        super().__init__(f"server answered {status}: {error}" + (f": {detail}" if detail else ""))
        self.status = status
        self.error = error
        self.detail = detail


class ResultMismatch(Exception):
    """The remote result differs from the local one beyond the tolerance."""


def no_align(kind: str | None = None) -> None:
    """Timed stages start at once (no CPU quota to align to).

    `align(kind)` runs before each timed client stage, with the stage's kind of work (kernel,
    encode, decode) and before the request ("request"): `client.throttle.Aligner` under a CPU quota.
    """


class OffloadClient:
    """Talks to one offload server. `persistent`: one keep-alive connection for every request (the
    server's gthread workers keep it open). Otherwise each request asks for `Connection: close`, so
    the next one opens a new TCP connection inside its timed request: its handshake counts in
    communication, as the paper's CGI requests' and the multi-language study's did.
    """

    def __init__(
        self,
        base_url: str,
        timeout: float = 900.0,
        align: Callable[[str], object] = no_align,
        persistent: bool = True,
        parallelism: int = 1,
        io_bytes: int | None = None,
        pacer: Pacer | None = None,
        retime: bool = False,
        server_retime: bool = False,
        codec_text: str = COMPACT,
    ) -> None:
        """`parallelism`: each request's body and reply over that many connections at once;
        `io_bytes`: the size of the client's writes (None: the whole body at once); `pacer`: the
        client's two stages last its device's time on its shared cores (concurrency); `retime`
        (scaled mode): a short stage's CPU time is the mean over repeated runs (`stage_cpu_s`);
        `server_retime` (a scaled server device): the server's likewise (`RETIME_HEADER`);
        `codec_text`: the JSON codecs' text both ways (CODEC_TEXTS; the era's: issue 45)."""
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.persistent = persistent
        self.session = requests.Session()
        self.parallelism, self.io_bytes = parallelism, io_bytes
        # parallelism: a session (a connection) per part, the first one the client's own
        self.sessions = [self.session, *(requests.Session() for _ in range(parallelism - 1))]
        self.align = align  # runs before each timed client stage (client.throttle under a CPU quota)
        self.pacer = pacer
        self.retime = retime
        self.server_retime = server_retime
        self.codec_text = codec_text

    @property
    def holds_core(self) -> bool:
        """Whether its timed stages hold their core (`contracts.cpu_lock`): scaled stages, unless paced
        on shared cores (several clients' sharing of the cores is then their experiment)."""
        return self.retime and self.pacer is None

    def __enter__(self) -> OffloadClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for session in self.sessions:
            session.close()

    def asks(self, expected: Expected = NOTHING) -> dict[str, str]:
        """The request's ask of a scaled server device's server: its stages timed again, with what
        each is expected to take (`RETIME_HEADER`)."""
        return {RETIME_HEADER: retime_value(expected.server)} if self.server_retime else {}

    def _transport_error(self, exc: Exception) -> UserError:
        """Connection refused, timed out, or cut mid-response (e.g. a worker killed by its timeout)."""
        what = "cannot reach" if isinstance(exc, requests.ConnectionError) else "lost the connection to"
        return UserError(
            f"{what} the offload server at {self.base_url}: {type(exc).__name__}: {exc}",
            "is it running (python -m server --bind ADDR --port N)? check --url, --timeout and its log",
        )

    def health(self) -> dict:
        try:
            resp = self.session.get(f"{self.base_url}/v1/health", timeout=min(self.timeout, 30.0))
        except requests.RequestException as exc:
            raise self._transport_error(exc) from exc
        if resp.status_code != 200:
            raise _error_from(resp.status_code, resp.content)
        return resp.json()

    def offload(
        self, op: str, operands: list[np.ndarray], codec: str, expected: Expected = NOTHING
    ) -> tuple[np.ndarray, StageTimes]:
        """Run `op` on the server; the operands' dtype is the request's dtype. `expected`: what each
        stage's work is expected to take on this host now (scaled mode: `contracts.short_work`)."""
        c = _codec(codec, self.codec_text)
        # replicas on this host: no other timed stage runs meanwhile; scaled: nothing else on its core
        with CPU_LOCK.held(unpreempted=self.holds_core):
            self.align("encode")
            c0, t0 = time.thread_time(), time.perf_counter()
            try:
                body, headers = c.encode_request(operands)
            except CodecError as exc:
                raise UserError(f"{c.name} cannot encode these operands: {exc}", "use the raw codec") from exc
            t1, c1 = time.perf_counter(), time.thread_time()
            c1 = c0 + stage_cpu_s(
                self.retime, lambda: c.encode_request(operands), c1 - c0, "encode", expected
            )
        if self.pacer is not None:  # the device's encode, after its other requests' stages
            t1 = self.pacer.stage("encode", t0, c1 - c0)
        url, headers = f"{self.base_url}/v1/ops/{op}", {**headers, **self.asks(expected), "X-Codec": c.name}
        if self.codec_text != COMPACT:  # the reply in the same text (a server that predates it: compact)
            headers[CODEC_TEXT_HEADER] = self.codec_text
        headers.update({} if self.persistent else CLOSE)
        sent = body if self.parallelism == 1 and self.io_bytes is None else memoryview(body_bytes(body))
        self.align("request")
        tr = time.perf_counter()
        try:
            if self.parallelism > 1:
                answers = post_parts(self.sessions, url, sent, headers, self.io_bytes, self.timeout)
                bad = [a for a in answers if a.status != 200]
                status, reply_headers = (bad or answers)[0].status, answers[0].headers
                content = bad[0].content if bad else b"".join(a.content for a in answers)
            else:
                data = written(sent, self.io_bytes) if self.io_bytes else sent
                resp = self.session.post(url, data=data, headers=headers, timeout=self.timeout, stream=True)
                # one read: iter_content's 10 KiB pieces cost CPU
                content = resp.raw.read(decode_content=True)
                status, reply_headers = resp.status_code, resp.headers
        except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
            raise self._transport_error(exc) from exc
        t2 = time.perf_counter()
        if status != 200:
            raise _error_from(status, content)
        with CPU_LOCK.held(unpreempted=self.holds_core):
            self.align("decode")
            c3, t3 = time.thread_time(), time.perf_counter()
            result = c.decode_response(content, reply_headers)
            t4, c4 = time.perf_counter(), time.thread_time()
            c4 = c3 + stage_cpu_s(
                self.retime, lambda: c.decode_response(content, reply_headers), c4 - c3, "decode", expected
            )
        if self.pacer is not None:
            t4 = self.pacer.stage("decode", t3, c4 - c3)
        times = stage_times((t0, t1, tr, t2, t3, t4), (c0, c1, c3, c4), reply_headers.get("Server-Timing"))
        return result, StageTimes(**times, bytes_up=len(body), bytes_down=len(content))


def stage_cpu_s(
    retime: bool, work: Callable[[], object], one_run_s: float, kind: str, expected: Expected = NOTHING
) -> float:
    """A client stage's CPU seconds (its thread's for marshalling, the process's for a kernel:
    `contracts.short_work.cpu_clock`): its run's, or with `retime` (scaled mode) a short run's again
    over repeated runs of its work, and a figure far above what `expected` says of its kind again;
    the wall time stays the real run's."""
    if not retime:
        return one_run_s
    return per_run_cpu_s(work, one_run_s, cpu_clock(kind), expected.client.get(kind))


def stage_times(wall: tuple[float, ...], cpu: tuple[float, ...], server_timing: str | None) -> dict:
    """A trial's stage times from its clock readings, for every transport alike.

    wall: before encode, after encode, request sent, response received, before decode, after decode
    (the gaps between a stage's end and the next one's start are the throttle's preparations, outside
    every stage); cpu: process time before and after encode, before and after decode. Communication
    is the request time minus the server's stages (the paper's Fig. 3): it cannot be measured directly.
    A cgi server's process start-up (`server_start`) is reported but stays in communication, as in
    the paper, whose CGI server's start-up was in its POST time and not among its probed stages. The
    server's queueing (`queue`: the wait for a work slot, its body in) is server time, so
    communication excludes it; its waits for the host-wide CPU lock (`cpulock`: replicas on one host)
    are no time of this trial's, so communication and the completion time exclude them. Its timing its
    stages' work again (`retime`: a scaled server device) is the measurement's own work, which no
    device's request does: `t_request` itself leaves it out, and so everything made of it.
    """
    t0, t1, tr, t2, t3, t4 = wall
    c0, c1, c3, c4 = cpu
    server = parse_server_timing(server_timing)
    s_decode, s_compute, s_encode = (server.get(k, 0.0) for k in SERVER_STAGES)
    waited = server.get(SERVER_LOCK_WAIT, 0.0)  # for another testbed's stage: no time of this trial's
    # the request's wall time less the server's timing its own stages again (`retime`): the
    # measurement's own work, which no device's request does
    request = (t2 - tr) - server.get(SERVER_RETIME, 0.0)
    cpu_server = parse_server_timing(server_timing, "cpu")
    return {
        **{f"cpu_{column[2:]}": cpu_server.get(stage) for stage, column in SERVER_STAGES.items()},
        "t_client_encode": t1 - t0,
        "t_request": request,
        "t_server_decode": s_decode,
        "t_server_compute": s_compute,
        "t_server_encode": s_encode,
        "t_client_decode": t4 - t3,
        "t_comm": request - (s_decode + s_compute + s_encode) - server.get(SERVER_QUEUE, 0.0) - waited,
        "t_total": (t1 - t0) + request - waited + (t4 - t3),
        "cpu_client_encode": c1 - c0,
        "cpu_client_decode": c4 - c3,
        "t_server_start": server.get(SERVER_START),
        "cpu_server_start": cpu_server.get(SERVER_START),
        "t_server_queue": server.get(SERVER_QUEUE),
    }


def _codec(name: str, text: str = COMPACT) -> Codec:
    if name not in CODECS:
        raise UserError(f"unknown codec {name!r}", f"use one of: {', '.join(CODECS)}")
    try:
        return get_codec(name, text)
    except UnknownCodec:
        raise UserError(f"unknown codec text {text!r}", f"use one of: {', '.join(CODEC_TEXTS)}") from None


def _error_from(status: int, content: bytes) -> OffloadError:
    """The server's JSON error, or the start of whatever else answered (a proxy, another service)."""
    try:
        body = json.loads(content)
        return OffloadError(status, str(body["error"]), str(body.get("detail", "")))
    except (ValueError, KeyError, TypeError):
        return OffloadError(status, "non-JSON error response", content[:200].decode("utf-8", "replace"))


def local(op: str, operands: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """Run `op` here, through the server's own table; returns the result and its completion time."""
    result, wall, _ = local_times(op, operands)
    return result, wall


def local_times(
    op: str,
    operands: list[np.ndarray],
    align: Callable[[str], object] = no_align,
    retime: bool = False,
    expected: Expected = NOTHING,
) -> tuple[np.ndarray, float, float]:
    """`local`, with the CPU seconds this process spent as well as the wall-clock seconds (`retime`:
    a short kernel's over repeated runs, `stage_cpu_s`)."""
    try:
        with CPU_LOCK.held(unpreempted=retime):
            align("kernel")
            cpu, start = time.process_time(), time.perf_counter()
            result = execute(op, operands)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            return result, wall, stage_cpu_s(retime, lambda: execute(op, operands), cpu, KERNEL, expected)
    except UnknownOp as exc:
        raise UserError(f"unknown operation {op!r}", f"use one of: {', '.join(OPS)}") from exc
    except OpError as exc:
        raise UserError(f"{op}: {exc}") from exc


def check_result(remote: np.ndarray, local: np.ndarray, rtol: float = 1e-7, atol: float = 1e-9) -> None:
    """Raise ResultMismatch unless the two agree: same shape and dtype; integers exactly, floats to tolerance.

    Both runs use the same code, but BLAS may sum in a different order on the other host.
    """
    if remote.shape != local.shape or remote.dtype != local.dtype:
        raise ResultMismatch(
            f"remote is {remote.dtype.name} {remote.shape}, local is {local.dtype.name} {local.shape}"
        )
    if local.dtype.kind in "iu":
        bad = int(np.count_nonzero(remote != local))
        if bad:
            raise ResultMismatch(f"{bad} of {local.size} integer entries differ")
        return
    close = np.isclose(remote, local, rtol=rtol, atol=atol, equal_nan=True)
    if not close.all():
        diff = np.abs(remote.astype(np.float64) - local)[~close]
        raise ResultMismatch(
            f"{diff.size} of {local.size} entries differ beyond rtol={rtol:g}, atol={atol:g} "
            f"(largest difference {np.nanmax(diff):.3g})"
        )


def make_operands(
    op: str, size: int, dtype: str, rng: np.random.Generator, int_range: IntRange | None = None
) -> list[np.ndarray]:
    """Random `size` x `size` inputs the op accepts, made outside any timed region.

    inv gets a strictly diagonally dominant matrix (never singular, well conditioned); log gets
    entries in [1, 2) (floats) or 1..99 (ints); integer entries stay small so products cannot overflow.
    `int_range` (integer dtypes; `contracts.operands`): mul's entries, inv's off its diagonal and
    log's from max(low, 1), drawn as `numpy.random.randint(low, high)` draws them; None: the above.
    """
    if op not in OPS:
        raise UserError(f"unknown operation {op!r}", f"use one of: {', '.join(OPS)}")
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}", f"use one of: {', '.join(DTYPES)}")
    if size < 1:
        raise UserError(f"matrix size {size} must be at least 1")
    problem = check_int_range(int_range, dtype, (op,), (size,))
    if problem:
        raise UserError(f"int_range {problem}", FIX)
    n, floats = size, dtype == "float64"

    def matrix(lo: int, hi: int) -> np.ndarray:
        return (lo + rng.random((n, n)) * (hi - lo)) if floats else rng.integers(lo, hi, (n, n), dtype=dtype)

    if int_range is not None:
        low, high = int_range
        if op == "log":
            return [draw(rng, (max(low, 1), high), (n, n), dtype)]
        if op == "inv":
            a = draw(rng, int_range, (n, n), dtype)
            a[np.diag_indices(n)] += max(abs(low), abs(high - 1)) * n + 1  # dominant, as below
            return [a]
        return [draw(rng, int_range, (n, n), dtype) for _ in range(OPS[op].arity)]
    if op == "inv":
        a = matrix(-10, 10)
        a[np.diag_indices(n)] += 10 * n + 1  # |diagonal| > sum of |off-diagonal| in each row
        return [a]
    if op == "log":
        return [matrix(1, 2) if floats else matrix(1, 100)]
    lo, hi = (0, 1) if floats else MUL_INTS
    return [matrix(lo, hi) for _ in range(OPS[op].arity)]
