"""Offloading decision policies for a task stream (`testbed.online.task_stream`): each decides per task, when the
device starts it, whether to run it locally or offload it with its method.

- `local` and `remote-METHOD` always decide the same; the analysis's hindsight oracle is built from
  their runs over the same trace and stream (`analysis.online`).
- `online-METHOD` predicts both completion times from the per-stage model the predictor fits on a
  sweep of the same devices (`analysis.predict_model`), with the communication stage at a bandwidth
  estimated from the client's own recent transfers: the harmonic mean of the goodputs of its last
  `window` offloaded tasks, each the task's bytes on the wire over its communication time less the
  model's per-request constant (the estimator of rate-based adaptive video players, e.g. FESTIVE and
  MPC, Yin et al., SIGCOMM 2015: robust to one outlier transfer). A policy that offloads nothing
  learns nothing, so when its newest sample is older than `stale_s` (or it has none) it measures the
  link before it decides: the stream runs a probe, a small offload of the task's op at `probe_size`
  with the policy's method, as MAUI measures the link with a small transfer before it decides (Cuervo
  et al., MobiSys 2010). The probe's device time comes before the task's and counts in the policy's
  total. Offloading the task itself as the probe (this module's first design) cost a whole transfer
  at the low rate each time the link was down: tens of seconds for a mul 800, where a 128x128
  probe costs about a second at 4 Mbit/s.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from analysis.predict_model import BorderModel
from contracts.errors import UserError
from contracts.stages import LOCAL
from contracts.worker_api import TrialResult

KINDS = ("local", "remote", "online")
MIN_WIRE_S = 0.005  # the shortest wire time a sample takes (a 128x128 probe's 3 Mbit: 600 Mbit/s)


@dataclass(frozen=True)
class Decision:
    """What a policy chose for a task, and what it knew when it chose."""

    method: str  # LOCAL, or the codec it offloads with
    estimate_mbps: float | None = None
    predicted_local_s: float | None = None
    predicted_remote_s: float | None = None

    @property
    def remote(self) -> bool:
        return self.method != LOCAL


class Policy:
    """Always local; the base of the others (`observe` sees each finished task's worker answer)."""

    name = "local"
    method = LOCAL

    def needs_probe(self, now_s: float) -> bool:
        """Whether the link must be measured before the next decision (only an online policy asks)."""
        return False

    def decide(self, op: str, size: int, now_s: float) -> Decision:
        return Decision(LOCAL)

    def observe(self, result: TrialResult, decision: Decision, now_s: float) -> None:
        return None


class AlwaysRemote(Policy):
    def __init__(self, method: str) -> None:
        self.method = method
        self.name = f"remote-{method}"

    def decide(self, op: str, size: int, now_s: float) -> Decision:
        return Decision(self.method)


class Online(Policy):
    """Offload when the model's remote time at the estimated bandwidth beats its local time."""

    def __init__(self, method: str, model: BorderModel, window: int = 3, stale_s: float = 10.0) -> None:
        if window < 1 or stale_s < 0:
            raise UserError(
                f"estimator window {window} / stale_s {stale_s:g} out of range",
                "give a window of at least 1 transfer and stale_s of 0 (probe before every task) or more",
            )
        self.method, self.model, self.stale_s = method, model, stale_s
        self.name = f"online-{method}"
        self.samples: deque[tuple[float, float]] = deque(maxlen=window)  # (when, goodput bits/s)

    def estimate_bps(self) -> float | None:
        if not self.samples:
            return None
        return statistics.harmonic_mean([bps for _, bps in self.samples])

    def needs_probe(self, now_s: float) -> bool:
        return not self.samples or now_s - self.samples[-1][0] >= self.stale_s

    def decide(self, op: str, size: int, now_s: float) -> Decision:
        """Local when nothing is known of the link (no transfer, and its probe failed)."""
        local = max(float(self.model.local_time([op], [size])[0][0]), 0.0)
        estimate = self.estimate_bps()
        if estimate is None:
            return Decision(LOCAL, None, local, None)
        remote = self.model.remote_at(op, size, self.method, estimate)
        return Decision(self.method if remote < local else LOCAL, estimate / 1e6, local, remote)

    def observe(self, result: TrialResult, decision: Decision, now_s: float) -> None:
        """A successful offload's goodput (a task's or a probe's) becomes the newest sample. A small
        transfer's communication can come out below the model's per-request constant (its start-up
        varies by more than the wire takes at a high rate): it counts as `MIN_WIRE_S` on the wire, a
        link too fast to tell apart, rather than as no sample."""
        if not decision.remote or not result.ok or not result.t_comm:
            return
        wire = 8 * ((result.bytes_up or 0) + (result.bytes_down or 0))
        comm = self.model.comm
        seconds = (result.t_comm - comm.intercept) / comm.slope if comm.slope > 0 else result.t_comm
        if wire > 0:
            self.samples.append((now_s, wire / max(seconds, MIN_WIRE_S)))


def make_policies(
    kinds: tuple[str, ...], methods: tuple[str, ...], model: BorderModel | None, window: int, stale_s: float
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
