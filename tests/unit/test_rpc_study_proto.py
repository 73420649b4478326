"""The study's gRPC messages: one schema for both transports, the .proto text and the runtime
descriptor the same service, the same values through either."""

from __future__ import annotations

import numpy as np
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

from contracts.rpc_study_proto import FILE, file_descriptor, from_proto, messages, proto_text, to_proto
from contracts.tagless import study


def test_the_proto_text_compiles_to_the_descriptor_python_builds(tmp_path):
    (tmp_path / FILE).write_text(proto_text(study()))
    out = tmp_path / "set.pb"
    assert protoc.main(["protoc", f"-I{tmp_path}", f"--descriptor_set_out={out}", FILE]) == 0
    (compiled,) = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    assert compiled == file_descriptor(study())


def test_fields_are_numbered_in_declared_order_and_largedata_members_are_1_to_k():
    fields = file_descriptor(study()).message_type
    large = next(m for m in fields if m.name == "LargeData8192")
    assert [(f.name, f.number) for f in large.field[:2]] == [("m1", 1), ("m2", 2)]
    assert large.field[-1].number == 8192


def test_values_go_through_protobuf_unchanged():
    values = (np.array([-5, 7], dtype=np.int32),)
    assert from_proto("Numbers", to_proto("Numbers", values)) == ([-5, 7],)
    large = tuple(range(128))
    wire = to_proto("LargeData128", large).SerializeToString()
    assert from_proto("LargeData128", messages()["LargeData128"].FromString(wire)) == large
    assert to_proto("Hello", ("é",)).SerializeToString() == b"\n\x02\xc3\xa9"  # field 1, its length, UTF-8
