"""The refusal table (`server.refusals`) answers for both transports, and they answer alike.

In process, no sockets: the Flask app through its test client, the gRPC handler with a stand-in for
its context. The integration tests check each transport's answers on a real server.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from contracts import offload_pb2 as pb
from contracts.limits import Limits
from server import grpc_service
from server.app import create_app
from server.refusals import REFUSALS

REPO = Path(__file__).resolve().parents[2]
MAX_BODY_MB = 1.0


def test_every_row_has_an_http_status_and_a_grpc_code():
    for row in REFUSALS:
        assert 400 <= row.http < 500, row
        assert grpc.StatusCode[row.grpc] is not grpc.StatusCode.OK, row  # KeyError: not a code's name


def test_no_row_hides_a_later_one():
    """Rows are tried in order: a row that matches all a later row matches makes the later one dead."""
    for i, later in enumerate(REFUSALS):
        for earlier in REFUSALS[:i]:
            covers = issubclass(later.kind, earlier.kind) and earlier.error in (None, later.error)
            assert not covers, f"{earlier} comes before {later}"


class Aborted(Exception):
    pass


class Context:
    """What `grpc_service.execute` uses of a `grpc.ServicerContext`."""

    def invocation_metadata(self) -> tuple:
        return ()

    def set_trailing_metadata(self, metadata: tuple) -> None:
        self.trailing = dict(metadata)

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


def _req(op: str, *matrices: pb.Matrix) -> bytes:
    return pb.OpRequest(op=op, operands=list(matrices)).SerializeToString()


ONE = pb.Matrix(rows=1, cols=1, values=[1.0])
COLUMN = pb.Matrix(rows=40000, cols=1, values=[1.0] * 40000)
ROW = pb.Matrix(rows=1, cols=40000, values=[1.0] * 40000)
# one bad request of each kind, as a protobuf body the HTTP path gets for the op in its URL
CASES = [
    ("eval", _req("eval", ONE), 404, "UNIMPLEMENTED", "unknown operation"),
    ("log", b"\xff\xff\xff\xff", 400, "INVALID_ARGUMENT", "malformed protobuf"),
    ("mul", _req("mul", *[ONE] * 17), 400, "RESOURCE_EXHAUSTED", "too many operands"),
    ("mul", _req("mul", ONE), 400, "INVALID_ARGUMENT", "wrong number of operands"),
    ("mul", _req("mul", COLUMN, ROW), 413, "RESOURCE_EXHAUSTED", "result too large"),
]
HTTP_ONLY = [(415, "INVALID_ARGUMENT")]  # an unknown X-Codec: gRPC has one codec


def test_the_cases_reach_every_pair_of_answers_in_the_table():
    reached = {(http, code) for *_, http, code, _ in CASES} | set(HTTP_ONLY)
    assert reached == {(row.http, row.grpc) for row in REFUSALS}


@pytest.mark.parametrize(("op", "body", "status", "code", "error"), CASES, ids=[c[4] for c in CASES])
def test_one_bad_request_gets_the_same_answer_over_both_transports(op, body, status, code, error):
    resp = (
        create_app(max_body_mb=MAX_BODY_MB)
        .test_client()
        .post(f"/v1/ops/{op}", data=body, headers={"X-Codec": "protobuf"})
    )
    context = Context()
    with pytest.raises(Aborted) as aborted:
        grpc_service.execute(body, context, Limits.from_mb(MAX_BODY_MB))
    assert resp.status_code == status and resp.json["error"] == error
    assert aborted.value.args == (grpc.StatusCode[code], f"{error}: {resp.json['detail']}")


def test_an_unknown_codec_is_refused_over_http():
    resp = create_app().test_client().post("/v1/ops/log", data=b"x", headers={"X-Codec": "pickle"})
    assert resp.status_code == 415 and resp.json["error"] == "unknown codec"
    assert resp.json["detail"].startswith("unknown codec 'pickle'; known: ")


def test_the_http_server_does_not_import_grpc():
    """The table names gRPC codes as strings: gunicorn's forking master must not load grpc."""
    script = "import sys, server.app, server.refusals; print(sorted(m for m in sys.modules if 'grpc' in m))"
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
