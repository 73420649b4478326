"""Calls of the lightweight-RPC study's service over gRPC: `client.tagless_call`'s calls, the other way.

`GrpcStudyClient.call` takes and returns the same values as `TaglessClient.call` (a message's fields
in order, `contracts.rpc_study_proto` turning them into protobuf messages), so a sweep calls either
transport alike. The connection policy is the other transports': `persistent` keeps one channel
(one HTTP/2 connection); otherwise each call opens a channel of its own and closes it. The bytes a
call counts are its messages' as gRPC frames them (a 5-byte length prefix and the serialized
message); HTTP/2's frames and headers around them are what the link's counters add.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from client.tagless_call import CallRefused, Reply
from contracts.rpc_study_proto import from_proto, messages, method_path, to_proto
from contracts.stages import parse_server_timing
from contracts.tagless import Method, Schema, Timing, study

GRPC_PREFIX = 5  # a gRPC message's frame: a compressed flag and a 4-byte length
OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


class GrpcStudyClient:
    def __init__(
        self, target: str, persistent: bool = True, timeout: float = 60.0, schema: Schema | None = None
    ):
        self.target = target
        self.persistent = persistent
        self.timeout = timeout
        self.schema = schema or study()
        self.classes = messages()
        self._channel: grpc.Channel | None = None
        self._stubs: dict[str, grpc.UnaryUnaryMultiCallable] = {}

    def method(self, name: str) -> Method:
        return self.schema.method(name)

    def _stub(self, name: str) -> grpc.UnaryUnaryMultiCallable:
        if self._channel is None:
            options = OPTIONS if self.persistent else [*OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
            self._channel = grpc.insecure_channel(self.target, options=options)
            self._stubs = {}
        if name not in self._stubs:  # bytes in, bytes out: marshalling is the caller's, and timed
            self._stubs[name] = self._channel.unary_unary(method_path(name))
        return self._stubs[name]

    def call(self, method: Method | str, values: Sequence, timing: bool = False) -> Reply:
        """One call of `method` with its request's `values`: its reply; CallRefused for an error status."""
        if isinstance(method, str):
            method = self.method(method)
        body = to_proto(method.request.name, tuple(values)).SerializeToString()
        try:
            content, call = self._stub(method.name).with_call(body, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise CallRefused(method.name, exc.code().value[0], exc.details() or "", exc.code().name) from exc
        finally:
            if not self.persistent:
                self.close()
        reply = self.classes[method.reply.name].FromString(content)
        server_timing = None
        if timing:
            header = dict(call.trailing_metadata() or ()).get("server-timing")
            ms, cpu = parse_server_timing(header, "dur"), parse_server_timing(header, "cpu")  # seconds
            server_timing = Timing(*(v[s] for s in ("decode", "compute", "encode") for v in (ms, cpu)))
        return Reply(
            from_proto(method.reply.name, reply),
            server_timing,
            GRPC_PREFIX + len(body),
            GRPC_PREFIX + len(content),
        )

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._stubs = {}

    def __enter__(self) -> GrpcStudyClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
