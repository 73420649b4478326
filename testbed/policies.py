"""Offloading decision policies for a task stream (`testbed.stream`): each decides per task, when the
device starts it, whether to run it locally or offload it with its method.

- `local` and `remote-METHOD` always decide the same; the analysis's hindsight oracle is built from
  their runs over the same trace and stream (`analysis.online`).
- `online-METHOD` predicts both completion times from the per-stage model the predictor fits on a
  sweep of the same devices (`analysis.predict_model`), with the communication stage at a bandwidth
  estimated from the client's own recent transfers: the harmonic mean of the goodputs of its last
  `window` offloaded tasks, each the task's bytes on the wire over its communication time less the
  model's per-request constant (the estimator of rate-based adaptive video players, e.g. FESTIVE and
  MPC, Yin et al., SIGCOMM 2015: robust to one outlier transfer). A policy that offloads nothing
  learns nothing, so when its newest sample is older than `stale_s` (or it has none) it offloads the
  task as a probe, recorded as such.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from analysis.predict_model import Model
from contracts.errors import UserError
from contracts.trials import LOCAL

KINDS = ("local", "remote", "online")


@dataclass(frozen=True)
class Decision:
    """What a policy chose for a task, and what it knew when it chose."""

    method: str  # LOCAL, or the codec it offloads with
    estimate_mbps: float | None = None
    predicted_local_s: float | None = None
    predicted_remote_s: float | None = None
    probe: bool = False

    @property
    def remote(self) -> bool:
        return self.method != LOCAL


class Policy:
    """Always local; the base of the others (`observe` sees each finished task's worker answer)."""

    name = "local"

    def decide(self, op: str, size: int, now_s: float) -> Decision:
        return Decision(LOCAL)

    def observe(self, record: dict, decision: Decision, now_s: float) -> None:
        return None


class AlwaysRemote(Policy):
    def __init__(self, method: str) -> None:
        self.method = method
        self.name = f"remote-{method}"

    def decide(self, op: str, size: int, now_s: float) -> Decision:
        return Decision(self.method)


class Online(Policy):
    """Offload when the model's remote time at the estimated bandwidth beats its local time."""

    def __init__(self, method: str, model: Model, window: int = 3, stale_s: float = 10.0) -> None:
        if window < 1 or stale_s <= 0:
            raise UserError(
                f"estimator window {window} / stale_s {stale_s:g} out of range",
                "give a window of at least 1 transfer and stale_s above 0",
            )
        self.method, self.model, self.stale_s = method, model, stale_s
        self.name = f"online-{method}"
        self.samples: deque[tuple[float, float]] = deque(maxlen=window)  # (when, goodput bits/s)

    def estimate_bps(self) -> float | None:
        if not self.samples:
            return None
        return statistics.harmonic_mean([bps for _, bps in self.samples])

    def decide(self, op: str, size: int, now_s: float) -> Decision:
        local = max(float(self.model.local_time([op], [size])[0][0]), 0.0)
        estimate = self.estimate_bps()
        if estimate is None or now_s - self.samples[-1][0] > self.stale_s:
            return Decision(
                self.method, None if estimate is None else estimate / 1e6, local, None, probe=True
            )
        remote = self.model.remote_at(op, size, self.method, estimate)
        return Decision(self.method if remote < local else LOCAL, estimate / 1e6, local, remote)

    def observe(self, record: dict, decision: Decision, now_s: float) -> None:
        """A successful offloaded task's goodput becomes the newest sample."""
        if not decision.remote or not record.get("ok") or not record.get("t_comm"):
            return
        wire = 8 * ((record.get("bytes_up") or 0) + (record.get("bytes_down") or 0))
        comm = self.model.comm
        seconds = (record["t_comm"] - comm.intercept) / comm.slope if comm.slope > 0 else record["t_comm"]
        if wire > 0 and seconds > 0:
            self.samples.append((now_s, wire / seconds))


def make_policies(
    kinds: tuple[str, ...], methods: tuple[str, ...], model: Model | None, window: int, stale_s: float
) -> list[Policy]:
    """The stream's policies in its order: `local` once, `remote` and `online` once per method."""
    out: list[Policy] = []
    for kind in kinds:
        if kind == "local":
            out.append(Policy())
        elif kind == "remote":
            out += [AlwaysRemote(m) for m in methods]
        elif kind == "online":
            if model is None:
                raise UserError(
                    "the online policy needs the predictor's model",
                    "give --model RUN_DIR (a sweep of the same devices)",
                )
            out += [Online(m, model, window, stale_s) for m in methods]
        else:
            raise UserError(f"unknown policy {kind!r}", f"use some of: {', '.join(KINDS)}")
    return out
