"""An RPC study's bytes on the wire per call (issue 46): what the appliance's ports sent each way
while one trial's batch ran, by the kernel's count (`Shaper.sent`: shaped or not, unlike the HTB
classes the group counters read), divided by the batch's calls and its one untimed first call
(`client.rpc_calls.run_batch`). It holds Ethernet, IP and TCP headers, the other way's ACKs, and the
transport's own framing (HTTP/2's frames and headers for gRPC) beside the messages: what the study's
Fig. 9d counts as a call's packets."""

from __future__ import annotations

from contracts.errors import UserError
from contracts.manifest import Session
from contracts.units import small_burst
from contracts.worker_api import TrialResult
from testbed.backends.lab import Lab

UNTIMED_CALLS = 1  # run_batch's warm-up call in a trial (the worker's `rpc`)


def shape_for_calls(lab: Lab, session: Session) -> None:
    """How an RPC study's links are shaped: with a burst of two frames (`small_burst`: the default's
    timer tick of data passed whole LargeData messages at line rate), and where the appliance's kernel
    has netem, each packet held for its bytes at the rate (`LinkSpec.serialize`): then no message
    crosses faster than a line of the rate would carry it. The session records which (`serialized`:
    true only where every testbed's links were), since the times depend on it."""
    lab.burst = small_burst(lab.inv.link.mtu)
    lab.serialize = lab.netem_available()
    session.serialized = lab.serialize and session.serialized is not False


class WireCount:
    """The ports' sent bytes as one trial begins; `per_call` reads them again as it ends."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.before = self.read()

    def read(self) -> dict[str, int] | None:
        """Bytes sent so far by the port each way (up: towards the server); None if unreadable (the
        counters annotate the trial, they do not decide whether it is valid)."""
        try:
            link = self.lab.counters().link or {}
        except UserError:
            return None
        ports = {"up": self.lab.up_if, "down": self.lab.down_if}
        if not all(port in link for port in ports.values()):
            return None
        return {d: int(link[port]["bytes"]) for d, port in ports.items()}

    def per_call(self, result: TrialResult) -> tuple[float, float] | None:
        """(up, down) bytes per call of the trial that has just ended; None for a failed trial or
        counters that could not be read (or went back: a port was replaced)."""
        after = self.read()
        if not result.ok or not result.calls or self.before is None or after is None:
            return None
        calls = result.calls + UNTIMED_CALLS
        up, down = (after[d] - self.before[d] for d in ("up", "down"))
        if up < 0 or down < 0:
            return None
        return up / calls, down / calls
