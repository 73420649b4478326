"""The operations table and the client's local side of it: results, dtypes, every refusal, inputs."""

from __future__ import annotations

import numpy as np
import pytest

from client.offload import ResultMismatch, check_result, local, make_operands
from contracts.errors import UserError
from contracts.ops import DTYPES, MAX_RESULT_ELEMENTS, OPS, Op, OpError, UnknownOp, execute

RNG = np.random.default_rng(0)
A = RNG.random((5, 5)) + 5 * np.eye(5)


def test_table():
    assert list(OPS) == ["mul", "inv", "log"]
    assert {name: op.arity for name, op in OPS.items()} == {"mul": 2, "inv": 1, "log": 1}
    assert all(isinstance(op, Op) and op.doc for op in OPS.values())


def test_results():
    b = RNG.random((5, 3))
    np.testing.assert_array_equal(execute("mul", [A, b]), A @ b)  # non-square operands are fine for mul
    np.testing.assert_allclose(execute("inv", [A]) @ A, np.eye(5), atol=1e-12)
    np.testing.assert_array_equal(execute("log", [A[:2]]), np.log(A[:2]))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_dtypes(dtype):
    a = np.array([[2, 1], [1, 1]], dtype=dtype)
    assert execute("mul", [a, a]).dtype == np.dtype(dtype)  # stays integer
    np.testing.assert_array_equal(execute("mul", [a, a]), [[5, 3], [3, 2]])
    assert execute("inv", [a]).dtype == np.float64
    np.testing.assert_allclose(execute("inv", [a]), [[1, -1], [-1, 2]])
    assert execute("log", [a]).dtype == np.float64


@pytest.mark.parametrize(
    ("op", "operands", "error"),
    [
        ("mul", [A, np.ones((4, 4))], "shape mismatch"),
        ("mul", [A], "wrong number of operands"),
        ("inv", [A, A], "wrong number of operands"),
        ("inv", [np.ones((2, 3))], "not square"),
        ("inv", [np.array([[1.0, 2.0], [2.0, 4.0]])], "singular matrix"),
        ("inv", [np.array([[np.nan, 0.0], [0.0, 1.0]])], "non-finite entries"),
        ("log", [np.array([[1.0, 0.0]])], "log needs positive entries"),
        ("log", [np.array([[1.0, -2.0]])], "log needs positive entries"),
        ("log", [np.array([[1.0, np.nan]])], "log needs positive entries"),
        ("log", [np.array([[-0.0]])], "log needs positive entries"),
        ("log", [np.ones(3)], "not a matrix"),
        ("mul", [A, A.astype(np.int64)], "bad dtype"),
        ("log", [np.ones((2, 2), dtype=np.float32)], "bad dtype"),
        ("mul", [np.ones((MAX_RESULT_ELEMENTS >> 10, 1)), np.ones((1, 2048))], "result too large"),
    ],
)
def test_refusals(op, operands, error):
    with pytest.raises(OpError) as exc:
        execute(op, operands)
    assert exc.value.error == error and not isinstance(exc.value, UnknownOp)


def test_unknown_op():
    with pytest.raises(UnknownOp, match="'exec'; known: mul, inv, log"):
        execute("exec", [A])


# ------------------------------------------------------------------ the client's local side
def test_local_runs_the_same_table():
    result, seconds = local("inv", [A])
    np.testing.assert_array_equal(result, execute("inv", [A]))
    assert seconds > 0
    with pytest.raises(UserError, match="unknown operation"):
        local("eval", [A])
    with pytest.raises(UserError, match="not square"):
        local("inv", [np.ones((2, 3))])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
def test_make_operands_fit_their_op(op, dtype):
    operands = make_operands(op, 40, dtype, np.random.default_rng(5))
    assert len(operands) == OPS[op].arity
    assert all(a.shape == (40, 40) and a.dtype == np.dtype(dtype) for a in operands)
    execute(op, operands)  # accepted
    if op == "inv":
        assert np.linalg.cond(operands[0].astype(float)) < 10
    if op == "log":
        assert (operands[0] > 0).all()
    if op == "mul" and dtype != "float64":
        big = np.abs(operands[0]).astype(np.int64) @ np.abs(operands[1]).astype(np.int64)
        assert big.max() < np.iinfo(dtype).max  # cannot overflow


def test_make_operands_is_seeded():
    one = make_operands("mul", 8, "float64", np.random.default_rng(3))
    two = make_operands("mul", 8, "float64", np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip(one, two, strict=True))
    assert not np.array_equal(one[0], one[1])


@pytest.mark.parametrize(
    ("op", "size", "dtype"), [("exec", 4, "float64"), ("mul", 4, "float16"), ("mul", 0, "float64")]
)
def test_make_operands_refuses(op, size, dtype):
    with pytest.raises(UserError):
        make_operands(op, size, dtype, np.random.default_rng(0))


def test_check_result():
    check_result(A.copy(), A)
    check_result(A * (1 + 1e-9), A)
    check_result(np.array([[np.nan]]), np.array([[np.nan]]))
    with pytest.raises(ResultMismatch, match="1 of 25 entries differ"):
        bad = A.copy()
        bad[2, 2] += 1e-3
        check_result(bad, A)
    with pytest.raises(ResultMismatch, match="float64"):
        check_result(A[:2], A)
    ints = np.arange(4, dtype=np.int32).reshape(2, 2)
    check_result(ints.copy(), ints)
    with pytest.raises(ResultMismatch, match="integer entries differ"):
        check_result(ints + np.eye(2, dtype=np.int32), ints)
    with pytest.raises(ResultMismatch):
        check_result(ints.astype(np.int64), ints)
