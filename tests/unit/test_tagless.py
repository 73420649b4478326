"""The tagless wire format's Python codec: the shared vectors, the schema's reader, frames."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import tagless_vectors
from contracts.tagless import (
    HEADER,
    TIMING,
    Frame,
    Status,
    TaglessError,
    Timing,
    error_frame,
    error_message,
    parse,
    read_frame,
    study,
)
from contracts.tagless_vectors import VECTORS_PATH, canonical


def vector_lines(kind: str) -> list[list[str]]:
    return [line.split() for line in VECTORS_PATH.read_text().splitlines() if line.startswith(kind + " ")]


def unhex(text: str) -> bytes:
    return b"" if text == "-" else bytes.fromhex(text)


def test_the_vectors_file_is_what_the_codec_writes():
    assert VECTORS_PATH.read_text() == tagless_vectors.vectors(study())


@pytest.mark.parametrize("line", vector_lines("message"), ids=lambda line: line[1])
def test_each_message_vector_decodes_to_its_values_and_encodes_back(line):
    _, name, payload, _, *values = line
    message = study().messages[name]
    decoded = message.decode(unhex(payload))
    assert canonical(message, decoded) == " ".join(values)
    assert message.encode(decoded) == unhex(payload)


@pytest.mark.parametrize("line", vector_lines("frame"), ids=lambda line: line[1])
def test_each_frame_vector_is_built_and_read_alike(line):
    _, call, method, flags, status, payload, trailer, _, whole = line
    frame = Frame(int(call), int(method), unhex(payload), int(flags), int(status), unhex(trailer))
    assert frame.pack().hex() == whole
    read = io.BytesIO(bytes.fromhex(whole)).read
    assert read_frame(read, 1 << 20, request=False) == frame


@pytest.mark.parametrize("line", vector_lines("bad"), ids=lambda line: f"{line[1]}-{line[2][:16]}")
def test_each_bad_vector_is_refused(line):
    with pytest.raises(TaglessError) as refused:
        study().messages[line[1]].decode(unhex(line[2]))
    assert refused.value.status == Status.BAD_FRAME


def test_the_study_schema_has_its_four_operations_and_largedata_members_without_tags():
    s = study()
    assert [s.methods[i].name for i in (1, 2, 3)] == ["SayHello", "Average", "GetRandNums"]
    large = s.method("SendRcvLargeData8192")
    assert large.id == 8192 and large.request is large.reply
    assert large.request.names[:2] == ("m1", "m2") and len(large.request.fields) == 8192
    values = tuple(range(8192))
    assert len(large.request.encode(values)) == 4 * 8192  # four bytes a member, nothing else
    assert large.request.decode(large.request.encode(values)) == values


def test_a_repeated_field_is_a_count_and_packed_values():
    numbers = study().messages["Numbers"]
    assert numbers.encode(([1, -1],)) == struct.pack("<Iii", 2, 1, -1)
    (values,) = numbers.decode(struct.pack("<Iii", 2, 1, -1))
    assert values.tolist() == [1, -1]


@pytest.mark.parametrize(
    "values", [(1 << 31,), ("not a number",)], ids=["past int32", "a string for an int32"]
)
def test_a_value_its_type_cannot_hold_is_refused_when_encoding(values):
    with pytest.raises(ValueError, match="Count"):
        study().messages["Count"].encode(values)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("message A { int31 x; }", "no type int31"),
        ("message A { repeated string x; }", "no type repeated string"),
        ("message A { int32 x; int32 x; }", "a field name twice"),
        ("message A { int32 x; } service S { 1 F(A) returns (B); }", "unknown message"),
        ("message A { int32 x; } service S { 1 F(A) returns (A); 1 G(A) returns (A); }", "id taken"),
        ("message A { int32 x; } service S { 0 F(A) returns (A); }", "out of 1..65535"),
        ("message A { int32 x }", "expected ';'"),
        ("message A { int32 x; ", "ends early"),
        ("messages A {}", "expected 'message' or 'service'"),
        ("message A { int32 x = 1; }", "cannot read"),
    ],
)
def test_a_bad_schema_says_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=says):
        parse(text)


def test_comments_and_ranges_in_a_schema():
    s = parse(
        "# a comment\nmessage P { double xy[3..4]; string s; } # another\nservice S { 9 F(P) returns (P); }"
    )
    assert s.messages["P"].names == ("xy3", "xy4", "s") and s.methods[9].name == "F"


def test_a_request_with_a_trailer_or_a_status_is_a_bad_frame():
    for frame in (Frame(1, 1, b"", status=1), Frame(1, 1, b"", trailer=b"x")):
        with pytest.raises(TaglessError) as refused:
            read_frame(io.BytesIO(frame.pack()).read, 100)
        assert refused.value.status == Status.BAD_FRAME


def test_a_payload_past_the_limit_is_too_large_before_it_is_read():
    head = HEADER.pack(3, 1, 0, 0, 1 << 30, 0)  # nothing follows: the limit is checked on the header
    with pytest.raises(TaglessError) as refused:
        read_frame(io.BytesIO(head).read, 1 << 20)
    assert refused.value.status == Status.TOO_LARGE


@pytest.mark.parametrize("cut", [0, 5, HEADER.size + 2])
def test_a_stream_that_ends_is_none_before_a_header_else_a_bad_frame(cut):
    whole = Frame(1, 1, b"abcd", flags=TIMING).pack()
    if cut == 0:
        assert read_frame(io.BytesIO(b"").read, 100) is None
        return
    with pytest.raises(TaglessError, match="ended inside"):
        read_frame(io.BytesIO(whole[:cut]).read, 100)


def test_an_error_frame_carries_its_message_and_the_timing_trailer_its_six_figures():
    frame = error_frame(5, 77, Status.UNKNOWN_METHOD, "no method 77")
    assert frame.status == Status.UNKNOWN_METHOD and error_message(frame) == "no method 77"
    timing = Timing(1.0, 0.5, 2.0, 1.5, 3.0, 2.5)
    assert Timing.unpack(timing.pack()) == timing and len(timing.pack()) == 48
    with pytest.raises(TaglessError):
        Timing.unpack(b"\x00" * 47)


def test_canonical_values_match_the_vectors_spelling():
    mean = study().messages["Mean"]
    assert canonical(mean, (0.1,)) == "0.10000000000000001"


int32s = st.integers(-(1 << 31), (1 << 31) - 1)


@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=50), numbers=st.lists(int32s, max_size=50), count=int32s)
def test_any_values_round_trip(name, numbers, count):
    s = study().messages
    assert s["Hello"].decode(s["Hello"].encode((name,))) == (name,)
    assert (
        s["Numbers"].decode(s["Numbers"].encode((np.array(numbers, dtype=np.int32),)))[0].tolist() == numbers
    )
    assert s["Count"].decode(s["Count"].encode((count,))) == (count,)


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=600), name=st.sampled_from(["Hello", "Numbers", "Mean", "LargeData128"]))
def test_any_bytes_decode_or_are_refused_as_a_bad_frame(payload, name):
    message = study().messages[name]
    try:
        values = message.decode(payload)
    except TaglessError as exc:
        assert exc.status == Status.BAD_FRAME
    else:
        assert message.encode(values) == payload
