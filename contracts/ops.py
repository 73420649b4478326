"""The whitelist of matrix operations: the only code the server ever runs on a client's data.

One table (`OPS`) serves both the server and the client's local baseline, so a remote and a local
trial time exactly the same work: the operand checks plus the NumPy call. To add an operation, write
a check and a function and add one `Op(...)` row.

Dtypes: `mul` keeps the operands' dtype (integer products wrap around on overflow, as NumPy's do);
`inv` and `log` of integer matrices return float64, because their results are not integers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from contracts.images import apply, is_image_op
from contracts.stages import DTYPES

MAX_RESULT_ELEMENTS = 1 << 28  # 2 GiB of float64: a small (n x 1) @ (1 x n) must not ask for terabytes
# NumPy multiplies integer matrices without BLAS: 0.33 G int64 multiply-adds/s against 13 G for float64
# on the development VM (int32: 0.58 G). Integer work counts this many times, so that the work limit
# (`contracts.limits`) bounds time whatever the dtype.
INT_MUL_WEIGHT = 32
# LU factorization plus inversion: about 2 n^3 multiply-adds (measured 5.4 G n^3/s against mul's 13 G).
INV_WEIGHT = 2

Shape = tuple[int, int]


class OpError(ValueError):
    """The operands do not fit the operation (the server answers 400)."""

    def __init__(self, error: str, detail: str = "") -> None:
        super().__init__(f"{error}: {detail}" if detail else error)
        self.error = error
        self.detail = detail


class UnknownOp(OpError):
    """No such operation in the table (the server answers 404)."""


@dataclass(frozen=True)
class Cost:
    """What running an op on operands of given shapes will take, known before any operand exists."""

    result_shape: Shape
    result_dtype: np.dtype
    work: float  # float64 multiply-adds or their equivalent in time (see INT_MUL_WEIGHT)


def _elementwise_cost(shapes: Sequence[Shape], dtype: np.dtype) -> Cost:
    rows, cols = shapes[0]
    return Cost((rows, cols), np.dtype(np.float64), float(rows * cols))


def _mul_cost(shapes: Sequence[Shape], dtype: np.dtype) -> Cost:
    (m, k), (_, n) = shapes  # a shape mismatch is refused by the check, before compute
    weight = INT_MUL_WEIGHT if dtype.kind in "iu" else 1
    return Cost((m, n), dtype, float(m) * k * n * weight)


def _inv_cost(shapes: Sequence[Shape], dtype: np.dtype) -> Cost:
    rows, cols = shapes[0]
    return Cost((rows, cols), np.dtype(np.float64), float(rows) * rows * cols * INV_WEIGHT)


@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    check: Callable[[Sequence[np.ndarray]], None]  # raises OpError; runs before `fn`
    fn: Callable[..., np.ndarray]
    doc: str
    # from the operands' shapes and dtype alone: the server refuses what is over its limits before
    # it decodes or allocates anything (`contracts.limits`)
    cost: Callable[[Sequence[Shape], np.dtype], Cost] = _elementwise_cost


def _shape(a: np.ndarray) -> str:
    return "x".join(map(str, a.shape))


def _check_mul(operands: Sequence[np.ndarray]) -> None:
    a, b = operands
    if a.shape[1] != b.shape[0]:
        raise OpError("shape mismatch", f"mul needs A's columns == B's rows, got {_shape(a)} @ {_shape(b)}")
    if a.shape[0] * b.shape[1] > MAX_RESULT_ELEMENTS:
        raise OpError("result too large", f"{a.shape[0]}x{b.shape[1]} is over {MAX_RESULT_ELEMENTS} elements")


def _check_inv(operands: Sequence[np.ndarray]) -> None:
    (a,) = operands
    if a.shape[0] != a.shape[1]:
        raise OpError("not square", f"inv needs a square matrix, got {_shape(a)}")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise OpError(
            "non-finite entries", "inv needs finite entries (LAPACK's result is undefined otherwise)"
        )


def _check_log(operands: Sequence[np.ndarray]) -> None:
    (a,) = operands
    if not (a > 0).all():  # NaN fails this too
        raise OpError("log needs positive entries", "every entry must be > 0 (and not NaN)")


def _inv(a: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.inv(a.astype(np.float64, copy=False))
    except np.linalg.LinAlgError as exc:
        raise OpError("singular matrix", f"inv: {exc}") from exc


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("mul", 2, _check_mul, np.matmul, "A @ B; integer dtypes stay integer", _mul_cost),
        Op("inv", 1, _check_inv, _inv, "inverse of a square, non-singular A; float64 result", _inv_cost),
        Op(
            "log",
            1,
            _check_log,
            lambda a: np.log(a.astype(np.float64, copy=False)),
            "element-wise natural log of A (entries > 0); float64 result",
        ),
    )
}


def get_op(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise UnknownOp("unknown operation", f"{name!r}; known: {', '.join(OPS)}") from None


def execute(name: str, operands: Sequence[np.ndarray]) -> np.ndarray:
    """Check the operands against the table's row for `name`, then run it.

    Codecs already guarantee 2-D matrices of an allowed dtype with positive dimensions; the arity and
    the op-specific checks live here so that local and remote runs reject the same inputs.
    """
    if is_image_op(name):  # an image op (contracts.images): the image's filters, a list of images
        return apply(name, operands[0])
    op = get_op(name)
    if len(operands) != op.arity:
        raise OpError("wrong number of operands", f"{name} takes {op.arity}, got {len(operands)}")
    for i, a in enumerate(operands):
        if a.ndim != 2:
            raise OpError("not a matrix", f"operand {i} has {a.ndim} dimensions, need 2")
        if a.dtype.name not in DTYPES or a.dtype != operands[0].dtype:
            raise OpError(
                "bad dtype",
                f"operands must share one dtype of {', '.join(DTYPES)}; got "
                + ", ".join(x.dtype.name for x in operands),
            )
    op.check(operands)
    return op.fn(*operands)
