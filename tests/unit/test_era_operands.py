"""Operands as the paper's software made them (issue 45, item 2): the integer operands' range and the
era's JSON text, from the experiment file and the flags to the worker, the server and the run's files."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import ujson

from client.calibration_work import trial_operands
from client.offload import make_operands
from contracts.codecs import CODEC_TEXT_HEADER, CODECS, UnknownCodec, get_codec
from contracts.era_text import _ujson135_slow, ujson135_float, ujson135_matrix
from contracts.errors import UserError
from contracts.limits import Limits
from contracts.operands import check_int_range, parse_int_range
from contracts.run import (
    Experiment,
    Manifest,
    TrialRecord,
    TrialWriter,
    read_manifest,
    read_trials,
    write_manifest,
)
from contracts.worker_api import TrialSpec
from server.handler import handle_op
from server.timing import StageClock
from testbed.experiment import load_experiment
from testbed.overrides import override

GRID = {"ops": "mul", "sizes": "100", "rates": "10", "methods": "json,ujson,raw", "reps": 2}
INTS = np.array([[1, -2], [30, 4]], dtype=np.int32)
FLOATS = np.array([[0.1234567890123, 1.0, -2.5], [1e-11, 7.35e-8, 123456.789012345678]])


# ------------------------------------------------------------------ the range
def test_the_range_is_honoured_as_randint_draws_it():
    rng = np.random.default_rng(5)
    a, b = make_operands("mul", 60, "int32", rng, (0, 10))
    assert a.dtype == np.int32 and {a.min(), a.max(), b.min(), b.max()} == {0, 9}  # 10 excluded
    (inv,) = make_operands("inv", 60, "int32", rng, (0, 10))
    off = inv - np.diag(np.diag(inv))
    assert off.min() == 0 and off.max() == 9
    assert (np.abs(np.diag(inv)) > np.abs(off).sum(axis=1)).all()  # still never singular
    (log,) = make_operands("log", 60, "int32", rng, (0, 10))
    assert log.min() == 1 and log.max() == 9  # log's entries start at 1


def test_without_a_range_the_operands_are_as_before():
    seeded = lambda: np.random.default_rng([1, 50])  # noqa: E731
    a, b = make_operands("mul", 50, "int32", seeded())
    rng = seeded()
    assert (a == rng.integers(-10, 11, (50, 50), dtype="int32")).all()
    assert (b == rng.integers(-10, 11, (50, 50), dtype="int32")).all()
    assert all(
        (x == y).all()
        for x, y in zip(
            trial_operands("mul", 50, "int32", 1), trial_operands("mul", 50, "int32", 1, None), strict=True
        )
    )


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("0", "'0' is not a range of integers"),
        ([1, 1], "[1, 1] is empty (HIGH is excluded)"),
        ([0, 1.5], "is not a range of integers"),
        ([True, 3], "is not a range of integers"),
        ("9,2", "[9, 2] is empty"),
    ],
)
def test_a_bad_range_is_one_line(value, words):
    with pytest.raises(UserError) as exc:
        parse_int_range(value, "--int-range")
    assert words in exc.value.message and "\n" not in str(exc.value) and "randint" in exc.value.fix


def test_a_range_is_checked_against_dtype_ops_and_sizes():
    assert parse_int_range(" -3 , 7 ") == (-3, 7) and parse_int_range([0, 10]) == (0, 10)
    assert check_int_range(None, "float64", ("mul",), (400,)) is None
    assert check_int_range((0, 10), "int32", ("mul", "inv", "log"), (1200,)) is None
    assert "integer operands" in check_int_range((0, 10), "float64", ("mul",), (400,))
    assert "overflows int32 in mul at size 1200" in check_int_range((0, 2000), "int32", ("mul",), (1200,))
    assert check_int_range((0, 2000), "int64", ("mul",), (1200,)) is None
    assert "which log needs" in check_int_range((-5, 1), "int32", ("log",), (10,))
    assert "does not fit in int32" in check_int_range((0, 2**31 + 1), "int32", ("inv",), (10,))


# ------------------------------------------------------------------ the era's text
def test_era_json_is_python_35s_default_separators_byte_for_byte():
    era, compact = get_codec("json", "era"), get_codec("json")
    body, _ = era.encode_request([INTS, INTS[:, :1]])
    assert body == b'{"operands": [[[1, -2], [30, 4]], [[1], [30]]], "dtype": "int32"}'
    assert compact.encode_request([INTS])[0] == b'{"operands":[[[1,-2],[30,4]]],"dtype":"int32"}'
    out, _ = era.encode_response(np.array([[0.5, 1.25, 0.1]]))
    assert out == b'{"result": [[0.5, 1.25, 0.1]], "dtype": "float64"}'  # floats: repr, as 3.5's


def test_era_ujson_writes_floats_as_ujson_135_byte_for_byte():
    era = get_codec("ujson", "era")
    out, _ = era.encode_response(FLOATS)
    assert out == (
        b'{"result":[[0.123456789,1.0,-2.5],[0.0,0.0000000735,123456.7890123457]],"dtype":"float64"}'
    )
    # today's ujson: the shortest repr, exponents below 1e-4
    assert ujson.dumps(FLOATS.tolist()) == "[[0.1234567890123,1.0,-2.5],[1e-11,7.35e-8,123456.78901234567]]"
    assert era.encode_request([INTS])[0] == CODECS["ujson"].encode_request([INTS])[0]  # integers alike
    cases = {0.99999999999: "1.0", -0.0: "0.0", 2.00000000015: "2.0000000002", 1e17: "1.000000000000000e+17",
             -3e20: "-3.000000000000000e+20", 0.5: "0.5", 1e-10: "0.0000000001"}  # fmt: skip
    assert {v: ujson135_float(v) for v in cases} == cases
    assert ujson135_matrix(np.array([list(cases)])) == "[[" + ",".join(cases.values()) + "]]"


def test_the_vectorized_writer_is_the_scalar_one_across_chunks():
    """300 x 300 crosses a 65536-element chunk inside a row; magnitudes from 1e-12 to 1e15."""
    rng = np.random.default_rng(7)
    m = (rng.random((300, 300)) - 0.5) * 10.0 ** rng.integers(-12, 16, (300, 300))
    assert ujson135_matrix(m) == "[" + _ujson135_slow(m.ravel(), 0, 300, m.size)
    assert json.loads(ujson135_matrix(m)) == [[float(ujson135_float(v)) for v in row] for row in m.tolist()]


@pytest.mark.parametrize("name", ["json", "ujson"])
@pytest.mark.parametrize("operands", [[INTS, INTS], [FLOATS, FLOATS.T]])
def test_servers_decode_the_era_text_and_answer_in_it(name, operands):
    era = get_codec(name, "era")
    body, headers = era.encode_request(operands)
    want = operands[0] @ operands[1]
    for ask in ({CODEC_TEXT_HEADER: "era"}, {}):  # a server that predates the header: compact reply
        reply = handle_op(
            "mul", {**headers, "X-Codec": name, **ask}, lambda b=body: b, Limits.from_mb(16), StageClock()
        )
        assert reply.status == 200, reply.body
        assert reply.headers.get(CODEC_TEXT_HEADER) == ask.get(CODEC_TEXT_HEADER)
        expected = (era if ask else CODECS[name]).encode_response(
            CODECS[name].decode_request(body, headers)[0] @ CODECS[name].decode_request(body, headers)[1]
        )[0]
        assert reply.body == expected
        got = CODECS[name].decode_response(reply.body, reply.headers)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_codecs_without_an_era_text_are_the_same_and_a_bad_text_is_refused():
    assert get_codec("raw", "era") is CODECS["raw"] and get_codec("ujson", None) is CODECS["ujson"]
    with pytest.raises(UnknownCodec, match="unknown codec text 'pretty'"):
        get_codec("json", "pretty")
    body, headers = get_codec("json").encode_request([INTS, INTS])
    reply = handle_op(
        "mul", {**headers, "X-Codec": "json", CODEC_TEXT_HEADER: "pretty"}, lambda: body, Limits(1 << 20),
        StageClock(),
    )  # fmt: skip
    assert reply.status == 415 and "pretty" in json.loads(reply.body)["detail"]


# ------------------------------------------------------------------ file, flags, worker, run files
def test_the_options_come_from_the_file_and_the_flags(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(
        "ops: [mul, log]\nsizes: [100]\nrates: [10]\nmethods: [json]\nreps: 2\n"
        "dtype: int32\nint_range: [0, 10]\ncodec_text: era\n"
    )
    exp = load_experiment(path)
    assert exp.int_range == (0, 10) and exp.codec_text == "era"
    flags = override(exp, {"int_range": "-5,5", "codec_text": "compact"})
    assert flags.int_range == (-5, 5) and flags.codec_text == "compact"
    default = override(None, GRID)
    assert default.int_range is None and default.codec_text == "compact"


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("dtype: int32\nint_range: [0]", "key 'int_range': [0] is not a range of integers"),
        ("int_range: [0, 10]", "key 'int_range': is for integer operands and the dtype is float64"),
        ("dtype: int32\nint_range: [0, 5000]", "key 'int_range': [0, 5000] overflows int32"),
        ("codec_text: pretty", "key 'codec_text': unknown codec text 'pretty'"),
    ],
)
def test_bad_values_in_a_file_are_one_line_naming_the_key(tmp_path, line, words):
    path = tmp_path / "e.yaml"
    path.write_text("ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [json]\nreps: 2\n" + line + "\n")
    with pytest.raises(UserError) as exc:
        load_experiment(path)
    assert words in exc.value.message and str(path) in exc.value.message and "\n" not in exc.value.message


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ({"int_range": "0,10"}, "--int-range: is for integer operands and the dtype is float64"),
        ({"int_range": "ten", "dtype": "int32"}, "--int-range: 'ten' is not a range of integers"),
        ({"codec_text": "ERA!"}, "--codec-text: unknown codec text 'ERA!'"),
    ],
)
def test_bad_flags_are_one_line(flags, words):
    with pytest.raises(UserError) as exc:
        override(None, {**GRID, **flags})
    assert words in exc.value.message and "\n" not in exc.value.message


def test_the_options_round_trip_through_the_manifest_and_the_rows(tmp_path):
    exp = override(None, {**GRID, "dtype": "int32", "int_range": "0,10", "codec_text": "era"})
    path = tmp_path / "manifest.json"
    write_manifest(path, Manifest(run_id="r", status="complete", experiment=exp))
    assert read_manifest(path).experiment == exp
    older = json.loads(path.read_text())
    for key in ("int_range", "codec_text"):
        del older["experiment"][key]
    path.write_text(json.dumps({**older, "format_version": 9}))
    back = read_manifest(path).experiment
    assert (
        back.int_range is None
        and back.codec_text == "compact"
        and back == replace(exp, int_range=None, codec_text="compact")
    )
    trials = tmp_path / "trials.csv"
    writer = TrialWriter(trials)
    row = TrialRecord("mul", 100, "json", True, trial=1, rate_mbps=10.0, t_total=0.5, codec_text="era")
    writer.write(row)
    writer.close()
    assert read_trials(trials).records == [row]
    assert isinstance(
        Experiment(name="x", ops=(), sizes=(), rates_mbps=(), methods=(), reps=1).codec_text, str
    )


def test_the_worker_reports_its_text_in_every_row_and_draws_from_the_range():
    from client.worker import TrialWorker

    worker = TrialWorker("http://127.0.0.1:9/", seed=1, timeout=2.0, codec_text="era", int_range=(0, 10))
    local = worker.run(TrialSpec(trial=0, op="mul", size=20, dtype="int32", method="local"))
    remote = worker.run(TrialSpec(trial=1, op="mul", size=20, dtype="int32", method="json"))
    assert local.ok and local.codec_text == "era" and remote.codec_text == "era" and not remote.ok
    operands = worker.operands("mul", 20, "int32")
    assert all(a.min() >= 0 and a.max() <= 9 for a in operands)
    assert worker.client.codec_text == "era"
