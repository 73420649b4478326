"""The generated C++ codec agrees with the Python one byte for byte: the shared vectors, and more.

`make -C server/cpp_tagless` generates the header from the schema and builds the vector checker; the
checker must pass `contracts/tagless_vectors.txt`. The shared file holds the study's messages only, so
a second schema with every field type (and an empty message) gets vectors of its own, written here by
the Python codec with the edges the C++ must print and refuse alike: NaNs of either sign, infinities,
signed zero, subnormals, and strings at every corner of strict UTF-8 (overlong forms, surrogates, past
U+10FFFF, cut short), built once as a little-endian host builds it and once by the portable byte by
byte path a big-endian host takes. The generator's output is deterministic, and a schema it cannot
declare in C++ fails with the name that is wrong.
"""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import sys

import pytest

from contracts import tagless_cpp
from contracts.tagless import COUNT, TaglessError, parse, study
from contracts.tagless_vectors import VECTORS_PATH, canonical, vectors
from tests.helpers import REPO

BUILD = REPO / "server/cpp_tagless/build"
CHECKER = BUILD / "tagless-vectors"
pytestmark = pytest.mark.skipif(
    not (shutil.which("g++") and shutil.which("make")),
    reason="g++ and make are needed to build server/cpp_tagless (scripts/setup.sh installs them)",
)

# every type the IDL has; the names tagless_vectors.vectors() draws its frames and refusals from
ALL_TYPES = """
message Hello { string name; }
message Numbers { repeated int32 values; }
message Mean { double value; }
message LargeData128 { int32 m[1..128]; }
message Empty { }
message Scalars { int32 a; uint32 b; int64 c; uint64 d; float e; double f; int32 g; int32 h; }
message Mixed { uint64 id; bytes blob; string name; float x; float y; double z[1..3]; }
message Lists { repeated uint32 u; repeated int64 i; repeated uint64 q; repeated float f; repeated double d; }
service Every { 1 Echo(Mixed) returns (Mixed); 2 Lists(Lists) returns (Lists); }
"""


def build() -> None:
    done = subprocess.run(
        ["make", "-s", "-C", str(REPO / "server/cpp_tagless")], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def checker() -> str:
    build()
    return str(CHECKER)


def check(checker: str, path) -> subprocess.CompletedProcess:
    return subprocess.run([checker, str(path)], capture_output=True, text=True, timeout=120)


def test_the_cpp_codec_passes_the_shared_vectors(checker):
    done = check(checker, VECTORS_PATH)
    assert done.returncode == 0, done.stdout + done.stderr
    n = sum(1 for line in VECTORS_PATH.read_text().splitlines() if line and not line.startswith("#"))
    assert done.stdout.strip().splitlines()[-1] == f"{n} vectors ok"


def test_the_checker_reports_each_vector_that_does_not_hold(checker, tmp_path):
    lines = VECTORS_PATH.read_text().splitlines()
    broken = [
        line.replace(" = x", " = xff", 1) if line.startswith("message Hello ") else line for line in lines
    ]
    broken.append("bad Hello 0100000061")  # a good payload, listed as bad
    path = tmp_path / "broken.txt"
    path.write_text("\n".join(broken) + "\n")
    done = check(checker, path)
    assert done.returncode == 1
    assert "message Hello: decoded as" in done.stdout
    assert "bad Hello: decoded a payload it must refuse" in done.stdout
    assert done.stdout.strip().endswith(f"2 of {len(lines)} vectors failed")


def utf8_cases(seed: int = 7, n: int = 3000) -> list[bytes]:
    """Byte strings around strict UTF-8's edges, and random ones biased to lead bytes."""
    cases = [b"", b"\x00", b"a\x00b", b"\x7f", b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2\x80"]
    cases += [
        b"\xdf\xbf",
        b"\xe0\x80\x80",
        b"\xe0\x9f\xbf",
        b"\xe0\xa0\x80",
        b"\xed\x9f\xbf",
        b"\xed\xa0\x80",
    ]
    cases += [b"\xed\xbf\xbf", b"\xee\x80\x80", b"\xef\xbf\xbf", b"\xf0\x8f\xbf\xbf", b"\xf0\x90\x80\x80"]
    cases += [b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xff"]
    cases += [b"\xe2\x82", b"\xf0\x9d\x84", b"\xc3", b"ab\xc3", b"\xe2\x82\xac\xe2\x82"]
    rng = random.Random(seed)
    alphabet = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1]
    alphabet += [0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFE, 0xFF]
    for _ in range(n):
        cases.append(bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 6))))
    return cases


def extra_vectors() -> str:
    """Vectors the shared file has no room for: every type's edges, and UTF-8's."""
    schema = parse(ALL_TYPES)
    lines = [vectors(schema)]
    mean, hello = schema.messages["Mean"], schema.messages["Hello"]
    for bits in (0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000000, 0xFFF0000000000000, 1 << 63, 1):
        payload = struct.pack("<Q", bits)
        lines.append(f"message Mean {payload.hex()} = {canonical(mean, mean.decode(payload))}\n")
    scalars = schema.messages["Scalars"]
    edges = (
        (-1, 0, -(1 << 63), (1 << 64) - 1, float("-inf"), -0.0, 0, 1),
        ((1 << 31) - 1, (1 << 32) - 1, (1 << 63) - 1, 0, 1e-45, 5e-324, -(1 << 31), 7),
        (0, 1, 2, 3, float("nan"), float("inf"), 4, 5),
    )
    for values in edges:
        payload = scalars.encode(values)
        lines.append(f"message Scalars {payload.hex()} = {canonical(scalars, scalars.decode(payload))}\n")
    for raw in utf8_cases():
        payload = COUNT.pack(len(raw)) + raw
        try:
            text = canonical(hello, hello.decode(payload))
        except TaglessError:
            lines.append(f"bad Hello {payload.hex()}\n")
        else:
            lines.append(f"message Hello {payload.hex()} = {text}\n")
    return "".join(lines)


# the byte-by-byte path a big-endian host takes (wire::kLittle false), run here on a little-endian one
BIG_ENDIAN = ["-U__BYTE_ORDER__", "-D__BYTE_ORDER__=__ORDER_BIG_ENDIAN__"]


@pytest.mark.parametrize("order", [[], BIG_ENDIAN], ids=["native", "portable"])
def test_a_schema_of_every_type_and_utf8s_edges_agree_with_python(tmp_path, order):
    """The checker built against this test's schema: its vectors, decoded and printed alike."""
    header = tmp_path / "tagless_study.h"  # the name vectors.cc includes: -I puts this one first
    tagless_cpp.write(tagless_cpp.generate(parse(ALL_TYPES)), header)
    path = tmp_path / "vectors.txt"
    path.write_text(extra_vectors())
    assert "bad Hello" in path.read_text() and "message Empty - = " in path.read_text()
    binary = tmp_path / "tagless-vectors"
    source = REPO / "server/cpp_tagless/vectors.cc"
    argv = ["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", *order, f"-I{tmp_path}"]
    done = subprocess.run(
        [*argv, "-o", str(binary), str(source)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    done = check(str(binary), path)
    assert done.returncode == 0, done.stdout[-3000:]


def run_generator(*args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "contracts.tagless_cpp", *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_generator_writes_the_same_header_every_time(tmp_path):
    first, second = tmp_path / "a.h", tmp_path / "b.h"
    assert run_generator(str(first)).returncode == 0
    assert run_generator(str(second)).returncode == 0
    assert first.read_bytes() == second.read_bytes()
    assert first.read_text() == tagless_cpp.generate(study())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.h", "b.h"]  # no temporary file left


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ("message Hello { strin name; }", "no type strin"),
        ("message Hello { string name; ", "schema ends early"),
        ("message class { int32 a; }", "message class"),
        ("message Point { int32 x; double size; }", "field size"),
        ("message Point { int32 x; int32 Point; }", "field Point"),
        ("message Header { int32 x; }", "message Header"),
        ("message Out { int32 stdout; }", "field stdout"),
        ("message A { int32 x; } service S { 1 delete(A) returns (A); }", "method 1 delete"),
    ],
)
def test_the_generator_refuses_a_bad_schema_by_name(tmp_path, schema, named):
    path, out = tmp_path / "bad.tagless", tmp_path / "out.h"
    path.write_text(schema)
    done = run_generator(str(out), "--schema", str(path))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {path}: ") and named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()
