"""Offloading over gRPC (`offload.v1.Offload/Execute`), timed in the same stages as over HTTP.

Client encode and decode are building and reading the protobuf messages (`contracts.protobuf_codec`,
the very code of the HTTP `protobuf` codec); the call is sent as those bytes, so gRPC adds only its
HTTP/2 framing to the request time. Communication is the call time minus the server's stages, which
come back in the trailing metadata `server-timing`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import numpy as np

from client.offload import CPU_LOCK, OffloadError, StageTimes, no_align, stage_cpu_s, stage_times
from contracts.codecs import CodecError, get_codec
from contracts.errors import UserError
from contracts.protobuf_codec import EXECUTE
from contracts.short_work import NOTHING, Expected
from contracts.stages import RETIME_HEADER, retime_value

CODEC = get_codec("protobuf")
# gRPC's default 4 MiB receive limit would refuse an 800x800 result; the server sets the real limit
UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
TRANSPORT_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


def ready(target: str, timeout: float) -> bool:
    """Whether a gRPC server completes the HTTP/2 handshake at `target` within `timeout` seconds."""
    with GrpcOffloadClient(target) as client:
        try:
            client.wait_ready(timeout)
        except UserError:
            return False
    return True


class GrpcOffloadClient:
    """A channel to the server's gRPC port. `persistent`: one channel (one HTTP/2 connection) kept
    open between trials. Otherwise each trial gets a new channel, closed after it: its TCP and HTTP/2
    handshakes happen inside the timed call and count in communication, as over HTTP."""

    def __init__(
        self,
        target: str,
        timeout: float = 900.0,
        align: Callable[[str], object] = no_align,
        persistent: bool = True,
        retime: bool = False,
        server_retime: bool = False,
    ) -> None:
        """`retime` (scaled mode): a short stage's CPU time is the mean over repeated runs
        (`client.offload.stage_cpu_s`); `server_retime` (a scaled server device): the server's
        likewise (`RETIME_HEADER` as metadata)."""
        self.target = target
        self.timeout = timeout
        self.align = align  # runs before each timed client stage (client.throttle under a CPU quota)
        self.persistent = persistent
        self.retime = retime
        self.server_retime = server_retime
        self.connections = 0  # channels opened so far
        self._connect()

    @property
    def holds_core(self) -> bool:
        """Whether its timed stages hold their core (`contracts.cpu_lock`): scaled ones."""
        return self.retime

    def _connect(self) -> None:
        # gRPC shares connections between channels to the same target unless a channel keeps its own
        options = UNLIMITED if self.persistent else [*UNLIMITED, ("grpc.use_local_subchannel_pool", 1)]
        self.channel = grpc.insecure_channel(self.target, options=options)
        self._execute = self.channel.unary_unary(EXECUTE)  # bytes in, bytes out: marshalling is ours
        self.connections += 1

    def __enter__(self) -> GrpcOffloadClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def wait_ready(self, timeout: float) -> None:
        """Block until the channel has connected (the HTTP/2 handshake with the server succeeded)."""
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise UserError(
                f"no gRPC server answered at {self.target} within {timeout:g} s",
                "is the server running with --grpc-port (services: grpc_port in the inventory)?",
            ) from None

    def offload(
        self, op: str, operands: list[np.ndarray], expected: Expected = NOTHING
    ) -> tuple[np.ndarray, StageTimes]:
        """`expected`: what each stage's work is expected to take on this host now (scaled mode)."""
        try:
            return self._offload(op, operands, expected)
        finally:
            if not self.persistent:  # the next trial's channel: created here, connected by its call
                self.channel.close()
                self._connect()

    def metadata(self, expected: Expected = NOTHING) -> tuple[tuple[str, str], ...] | None:
        """The call's ask of a scaled server device's server (`RETIME_HEADER`, as HTTP's)."""
        return ((RETIME_HEADER.lower(), retime_value(expected.server)),) if self.server_retime else None

    def _offload(
        self, op: str, operands: list[np.ndarray], expected: Expected
    ) -> tuple[np.ndarray, StageTimes]:
        # replicas on this host: no other timed stage runs meanwhile; scaled: nothing else on its core
        with CPU_LOCK.held(unpreempted=self.holds_core):
            self.align("encode")
            c0, t0 = time.thread_time(), time.perf_counter()
            try:
                body = CODEC.encode_op_request(op, operands)
            except CodecError as exc:
                raise UserError(f"protobuf cannot encode these operands: {exc}") from exc
            t1, c1 = time.perf_counter(), time.thread_time()
            c1 = c0 + stage_cpu_s(
                self.retime, lambda: CODEC.encode_op_request(op, operands), c1 - c0, "encode", expected
            )
        self.align("request")
        tr = time.perf_counter()
        try:
            content, call = self._execute.with_call(
                body, timeout=self.timeout, metadata=self.metadata(expected)
            )
        except grpc.RpcError as exc:
            raise self._error(exc) from exc
        t2 = time.perf_counter()
        with CPU_LOCK.held(unpreempted=self.holds_core):
            self.align("decode")
            c3, t3 = time.thread_time(), time.perf_counter()
            result = CODEC.decode_response(content, {})
            t4, c4 = time.perf_counter(), time.thread_time()
            c4 = c3 + stage_cpu_s(
                self.retime, lambda: CODEC.decode_response(content, {}), c4 - c3, "decode", expected
            )
        server_timing = dict(call.trailing_metadata() or ()).get("server-timing")
        times = stage_times((t0, t1, tr, t2, t3, t4), (c0, c1, c3, c4), server_timing)
        return result, StageTimes(**times, bytes_up=len(body), bytes_down=len(content))

    def _error(self, exc: grpc.RpcError) -> Exception:
        code = exc.code()
        if code in TRANSPORT_CODES:
            return UserError(
                f"gRPC call to {self.target} failed: {code.name}: {exc.details()}",
                "is the server running with --grpc-port? check the address, --timeout and its log",
            )
        return OffloadError(code.value[0], code.name, exc.details() or "")
