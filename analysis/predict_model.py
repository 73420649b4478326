"""Per-stage models of an offloading trial, fitted by ordinary least squares on a run's successful trials.

One model per factor of the offloading inequality (issue 15):

- marshalling (client encode and decode, server decode and encode): seconds against bytes of matrix
  data (`contracts.device.operand_bytes` for the request, `result_bytes` for the response), per method;
- bytes on the wire: bytes_up and bytes_down against bytes of matrix data, per method;
- communication: seconds against bytes_up / goodput_up + bytes_down / goodput_down, plus a
  per-request constant, one model for all methods (the goodput is the link's, not the codec's);
- compute: seconds against the operation's work (`contracts.device.work`), per op, on the server
  (t_server_compute of remote trials) and locally (t_total of local trials).

Each line carries its residual standard error and (X'X)^-1, so a prediction comes with the variance of
a new trial; the stages' variances add (independence assumed) and the degrees of freedom of the sum
follow Welch-Satterthwaite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.load import refuse_several_devices
from analysis.stats import t_quantile
from contracts.device import operand_bytes, result_bytes, work
from contracts.errors import UserError
from contracts.run import Manifest
from contracts.stages import LOCAL, STAGES
from contracts.units import expected_goodput

# marshalling stage -> which matrix data it handles
MARSHAL = {
    "t_client_encode": "request",
    "t_server_decode": "request",
    "t_server_encode": "response",
    "t_client_decode": "response",
}
DIRECTIONS = {"up": "request", "down": "response"}


@dataclass(frozen=True)
class Line:
    """y = intercept + slope * x by OLS; through the origin when x takes a single value (no intercept
    can be told apart from the slope then)."""

    slope: float
    intercept: float
    cov: np.ndarray  # (X'X)^-1 over (slope, intercept), or 1x1 over the slope alone
    s: float  # residual standard error
    n: int
    dof: int
    r2: float

    def predict(self, x) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of a new observation at x (variance NaN without residual dof)."""
        x = np.asarray(x, dtype=float)
        mean = self.slope * x + self.intercept
        if self.cov.shape == (1, 1):
            lever = x * x * self.cov[0, 0]
        else:
            lever = self.cov[0, 0] * x * x + 2 * self.cov[0, 1] * x + self.cov[1, 1]
        s2 = self.s**2 if self.dof > 0 else np.nan
        return mean, s2 * (1.0 + lever)

    def quality(self) -> dict:
        return {"r2": self.r2, "residual_std": self.s, "n": self.n}


def fit_line(x, y, what: str) -> Line:
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) == 0 or not np.any(x):
        raise UserError(
            f"no successful trials to fit {what}",
            "predict from a run with successful trials of every requested op and method",
        )
    through_origin = np.unique(x).size < 2
    design = x[:, None] if through_origin else np.column_stack([x, np.ones_like(x)])
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ beta
    dof = len(y) - design.shape[1]
    s = float(np.sqrt(residual @ residual / dof)) if dof > 0 else float("nan")
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(residual @ residual) / total if total > 0 else float("nan")
    cov = np.linalg.pinv(design.T @ design)
    return Line(float(beta[0]), 0.0 if through_origin else float(beta[1]), cov, s, len(y), dof, r2)


def itemsize(trials: pd.DataFrame) -> int:
    dtypes = {d for d in trials.get("dtype", []) if d}
    return np.dtype(dtypes.pop()).itemsize if dtypes else 8


def matrix_bytes(op, size, which: str, item: int) -> np.ndarray:
    of = operand_bytes if which == "request" else result_bytes
    return np.array(
        [of(o, int(s), item) for o, s in zip(np.atleast_1d(op), np.atleast_1d(size), strict=True)]
    )


def works(op, size) -> np.ndarray:
    return np.array([work(o, int(s)) for o, s in zip(np.atleast_1d(op), np.atleast_1d(size), strict=True)])


class Goodput:
    """Bytes per second per (rate, direction): iperf3's measured goodput where the run validated the
    rate, else what the shaped link can carry (`expected_goodput`)."""

    def __init__(self, manifest: Manifest | None) -> None:
        self.measured: dict[tuple[float, str], float] = {}
        sums: dict[tuple[float, str], list[float]] = {}
        for check in manifest.validation if manifest else []:
            value = check.measured_mbps
            if check.direction is None or value is None or check.ok is False or value <= 0:
                continue  # a skipped check, or one that measured nothing usable
            sums.setdefault((float(check.rate_mbps), check.direction), []).append(float(value))
        self.measured = {k: float(np.mean(v)) for k, v in sums.items()}

    def mbps(self, rate_mbps: float, direction: str) -> tuple[float, str]:
        key = (float(rate_mbps), direction)
        if key in self.measured:
            return self.measured[key], "measured"
        return expected_goodput(int(round(rate_mbps * 1e6))) / 1e6, "expected"

    def bytes_per_s(self, rates, direction: str) -> np.ndarray:
        return np.array([self.mbps(r, direction)[0] * 1e6 / 8 for r in np.atleast_1d(rates)])


@dataclass
class BorderModel:
    marshal: dict[tuple[str, str], Line]  # (method, stage)
    wire: dict[tuple[str, str], Line]  # (method, up|down): wire bytes vs matrix bytes
    comm: Line  # t_comm vs seconds of wire bytes at goodput
    server: dict[str, Line]  # op -> t_server_compute vs work
    local: dict[str, Line]  # op -> local t_total vs work
    goodput: Goodput
    item: int

    def stages(self, op, size, rate, method) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
        """Per stage: predicted mean, variance and residual dof, vectorised over cells of one method."""
        op, size, rate = np.atleast_1d(op), np.atleast_1d(size), np.atleast_1d(rate).astype(float)
        out = {}
        for stage, which in MARSHAL.items():
            line = self._get(self.marshal, (method, stage), f"{stage} of {method}")
            out[stage] = (*line.predict(matrix_bytes(op, size, which, self.item)), line.dof)
        seconds = self.wire_seconds(op, size, rate, method)
        out["t_comm"] = (*self.comm.predict(seconds), self.comm.dof)
        out["t_server_compute"] = self._per_op(self.server, op, size, "server compute")
        return {s: out[s] for s in STAGES}

    def wire_bytes(self, op, size, method, direction: str) -> np.ndarray:
        line = self._get(self.wire, (method, direction), f"bytes {direction} of {method}")
        return line.predict(matrix_bytes(op, size, DIRECTIONS[direction], self.item))[0]

    def wire_seconds(self, op, size, rate, method) -> np.ndarray:
        return sum(
            self.wire_bytes(op, size, method, d) / self.goodput.bytes_per_s(rate, d) for d in DIRECTIONS
        )

    def remote_at(self, op: str, size: int, method: str, goodput_bps: float) -> float:
        """The predicted remote time of one task when the link carries `goodput_bps` both ways: what an
        online policy expects from its bandwidth estimate, where `stages` takes a rate's goodput."""
        op_, size_ = np.atleast_1d(op), np.atleast_1d(size)
        total = 0.0
        for stage, which in MARSHAL.items():
            line = self._get(self.marshal, (method, stage), f"{stage} of {method}")
            total += max(float(line.predict(matrix_bytes(op_, size_, which, self.item))[0][0]), 0.0)
        wire = sum(float(self.wire_bytes(op_, size_, method, d)[0]) for d in DIRECTIONS)
        total += max(float(self.comm.predict(8 * wire / goodput_bps)[0]), 0.0)
        return total + max(float(self._per_op(self.server, op_, size_, "server compute")[0][0]), 0.0)

    def local_time(self, op, size) -> tuple[np.ndarray, np.ndarray, float]:
        return self._per_op(self.local, np.atleast_1d(op), np.atleast_1d(size), "local compute")

    def _per_op(self, table: dict, op: np.ndarray, size: np.ndarray, what: str):
        """Mean, variance and the smallest residual dof of a compute model, over cells of any ops."""
        mean, var = np.zeros(len(op)), np.zeros(len(op))
        dof = np.inf
        for o in np.unique(op):
            at = op == o
            line = self._get(table, o, f"{what} of {o}")
            mean[at], var[at] = line.predict(works(op[at], size[at]))
            dof = min(dof, line.dof)
        return mean, var, dof

    @staticmethod
    def _get(table: dict, key, what: str) -> Line:
        if key not in table:
            raise UserError(
                f"the run has no successful trials for {what}",
                "predict only ops and methods the run measured",
            )
        return table[key]


def fit(trials: pd.DataFrame, manifest: Manifest | None) -> BorderModel:
    """Fit every stage on the successful trials. A run whose clients were of several devices is refused:
    the model has one client (one local line per op, one marshalling line per method)."""
    refuse_several_devices(
        trials, "the prediction", "predict from a run whose clients are of one device (a sweep per device)"
    )
    ok = trials[trials["ok"]]
    remote, local = ok[ok["method"] != LOCAL], ok[ok["method"] == LOCAL]
    item = itemsize(trials)
    goodput = Goodput(manifest)
    marshal, wire = {}, {}
    for method, g in remote.groupby("method"):
        data = {w: matrix_bytes(g["op"], g["size"], w, item) for w in ("request", "response")}
        for stage, which in MARSHAL.items():
            marshal[(method, stage)] = fit_line(data[which], g[stage], f"{stage} of {method}")
        for direction, which in DIRECTIONS.items():
            if g[f"bytes_{direction}"].notna().any():
                wire[(method, direction)] = fit_line(
                    data[which], g[f"bytes_{direction}"], f"bytes_{direction} of {method}"
                )
    if not remote["bytes_up"].notna().any():
        raise UserError(
            "trials.csv has no bytes_up/bytes_down, which the communication model needs",
            "predict from a run made by a sweep that records bytes on the wire",
        )
    seconds = np.zeros(len(remote))
    for direction in DIRECTIONS:
        seconds = seconds + remote[f"bytes_{direction}"].to_numpy(dtype=float) / goodput.bytes_per_s(
            remote["rate_mbps"], direction
        )
    comm = fit_line(seconds, remote["t_comm"], "communication")
    server = {
        op: fit_line(works(g["op"], g["size"]), g["t_server_compute"], f"server compute of {op}")
        for op, g in remote.groupby("op")
    }
    local_lines = {
        op: fit_line(works(g["op"], g["size"]), g["t_total"], f"local compute of {op}")
        for op, g in local.groupby("op")
    }
    return BorderModel(marshal, wire, comm, server, local_lines, goodput, item)


def predict_cells(model: BorderModel, cells: pd.DataFrame) -> pd.DataFrame:
    """Predicted remote and local times, 95% prediction interval of the remote time, decision, penalty."""
    out = []
    for method, g in cells.groupby("method", sort=False):
        stages = model.stages(g["op"].to_numpy(), g["size"].to_numpy(), g["rate_mbps"].to_numpy(), method)
        mean = sum(np.clip(m, 0, None) for m, _, _ in stages.values())
        var = sum(v for _, v, _ in stages.values())
        with np.errstate(invalid="ignore", divide="ignore"):
            dof = var**2 / sum(v**2 / d for _, v, d in stages.values())  # Welch-Satterthwaite
        half = t_quantile(dof) * np.sqrt(var)
        local, local_var, local_dof = model.local_time(g["op"].to_numpy(), g["size"].to_numpy())
        local = np.clip(local, 0, None)
        local_half = t_quantile(local_dof) * np.sqrt(local_var)
        # the penalty's interval: remote and local are independent fits, their variances add
        with np.errstate(invalid="ignore", divide="ignore"):
            pen_dof = (var + local_var) ** 2 / (var**2 / dof + local_var**2 / local_dof)
        pen_half = t_quantile(pen_dof) * np.sqrt(var + local_var)
        penalty = mean - local
        out.append(
            g.assign(
                predicted_remote_s=mean,
                predicted_remote_lo=mean - half,
                predicted_remote_hi=mean + half,
                predicted_local_s=local,
                offload=(mean < local).astype(int),
                penalty_s=penalty,
                predicted_local_lo=local - local_half,
                predicted_local_hi=local + local_half,
                penalty_lo=penalty - pen_half,
                penalty_hi=penalty + pen_half,
                # the decision is sure at 95% when the penalty's interval does not include zero
                offload_sure=(np.abs(penalty) > pen_half).astype(int),
            )
        )
    return pd.concat(out).loc[cells.index]


def border_mbps(model: BorderModel, op: str, sizes, method: str | None) -> np.ndarray:
    """Per size, the lowest rate (Mbit/s) from which offloading pays, on a link carrying what a shaped
    link carries (`expected_goodput`); inf where it never pays.

    method None: the marshalling-blind inequality of Melendez and McGarry, local compute > server
    compute + matrix data / goodput (no encode or decode, no per-request cost, no wire overhead).
    """
    sizes = np.asarray(sizes)
    ops = np.array([op] * len(sizes))
    local = model.local_time(ops, sizes)[0]
    server = model._get(model.server, op, f"server compute of {op}").predict(works(ops, sizes))[0]
    if method is None:
        fixed = server
        data = matrix_bytes(ops, sizes, "request", model.item) + matrix_bytes(
            ops, sizes, "response", model.item
        )
    else:
        fixed = server + sum(
            model.marshal[(method, s)].predict(matrix_bytes(ops, sizes, w, model.item))[0]
            for s, w in MARSHAL.items()
        )
        fixed = fixed + model.comm.intercept
        data = model.comm.slope * sum(model.wire_bytes(ops, sizes, method, d) for d in DIRECTIONS)
    room = local - fixed  # seconds left for moving the data
    payload_share = expected_goodput(10**9) / 10**9
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = data * 8 / room / payload_share / 1e6
    return np.where((room > 0) & (data >= 0), rate, np.inf)


def model_parameters(model: BorderModel) -> dict:
    """Every fitted parameter in the units a reader thinks in, with its fit quality."""

    def per_byte(line: Line) -> dict:
        mbs = 1e-6 / line.slope if line.slope > 0 else None
        return {"mb_per_s": mbs, "intercept_s": line.intercept, **line.quality()}

    def per_work(line: Line) -> dict:
        g = 1e-9 / line.slope if line.slope > 0 else None
        return {"gflop_per_s": g, "intercept_s": line.intercept, **line.quality()}

    marshalling: dict = {}
    for (method, stage), line in sorted(model.marshal.items()):
        marshalling.setdefault(method, {})[stage.removeprefix("t_")] = per_byte(line)
    wire: dict = {}
    for (method, direction), line in sorted(model.wire.items()):
        wire.setdefault(method, {})[direction] = {
            "bytes_per_matrix_byte": line.slope,
            "intercept_bytes": line.intercept,
            **line.quality(),
        }
    rates = sorted({r for r, _ in model.goodput.measured})
    return {
        "units": "marshalling in MB/s of matrix data (1e6 bytes); compute in GFLOP/s of the op's work "
        "(log: 1e9 evaluations/s); times in s",
        "itemsize": model.item,
        "marshalling": marshalling,
        "wire": wire,
        "communication": {
            "per_request_s": model.comm.intercept,
            "seconds_per_goodput_second": model.comm.slope,
            **model.comm.quality(),
        },
        "goodput_mbps": {
            f"{r:g}": {
                d: dict(zip(("mbps", "source"), model.goodput.mbps(r, d), strict=True)) for d in DIRECTIONS
            }
            for r in rates
        },
        "compute": {
            "server": {op: per_work(line) for op, line in sorted(model.server.items())},
            "local": {op: per_work(line) for op, line in sorted(model.local.items())},
        },
    }
