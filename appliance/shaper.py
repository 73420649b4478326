"""Shaping the appliance's egress ports with HTB (and netem where the kernel has it).

`plan_shaping` turns a LinkSpec into what each port gets (rates, bursts, quantum from the link and the
kernel's HZ), without root. `Shaper.plan` reads what the ports hold now and returns the tc operations
(`appliance.tc_ops.TcOp`) that take them there; `--dry-run` prints that list and `Shaper.apply`
executes exactly it, one netlink request per operation. A rate change between sweep cells is an
in-place class change. `Shaper` is the only place that talks to the kernel (netlink through pyroute2).
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable
from dataclasses import dataclass

from pyroute2 import IPRoute, NetNS
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.tcmsg import sched_netem

from appliance.tc_ops import CLASS_ID, FRESH, ROOT_HANDLE, ROOT_ID, PortState, TcOp, port_ops
from contracts.errors import UserError
from contracts.profiles import NETEM_FIX, NETEM_MISSING, LinkSpec
from contracts.units import ETH_HEADER, default_burst, kernel_hz

MAX_QUANTUM = 200_000


@dataclass(frozen=True)
class PortShaping:
    """What one egress port gets: an HTB class, and a netem child when delay or loss is asked for."""

    ifname: str
    direction: str  # "up" (client->server) or "down" (server->client)
    rate: int  # bits/s
    ceil: int
    burst: int  # bytes
    cburst: int
    quantum: int
    delay_ms: float | None = None
    loss_pct: float | None = None
    netem_limit: int | None = None
    serialize: bool = False  # netem's rate at the class's: each packet held for its bytes at the rate

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay_ms) or bool(self.loss_pct) or self.serialize


def plan_shaping(link: LinkSpec, up_if: str, down_if: str, hz: int | None = None) -> list[PortShaping]:
    """Client->server traffic leaves the appliance on `up_if`; server->client on `down_if`."""
    hz = hz or kernel_hz()
    ports = []
    for ifname, direction, rate in ((up_if, "up", link.up_rate), (down_if, "down", link.down_rate)):
        ceil = max(link.ceil or rate, rate)
        burst = link.burst or default_burst(rate, link.mtu, hz)
        cburst = link.burst or default_burst(ceil, link.mtu, hz)
        quantum = min(max(link.mtu + ETH_HEADER, rate // 8 // 10), MAX_QUANTUM)
        limit = None
        if link.delay_ms or link.loss_pct or link.serialize:
            # enough packets to hold rate x delay (the bandwidth-delay product), with headroom
            bdp_packets = rate / 8 * (link.delay_ms or 0) / 1000 / (link.mtu + ETH_HEADER)
            limit = max(1000, math.ceil(bdp_packets * 2))
        ports.append(
            PortShaping(
                ifname,
                direction,
                rate,
                ceil,
                burst,
                cburst,
                quantum,
                link.delay_ms,
                link.loss_pct,
                limit,
                link.serialize,
            )  # fmt: skip
        )
    return ports


def _netem_request(request: dict) -> None:
    """pyroute2's netem plugin reads `rate` into TCA_NETEM_RATE but leaves it in the request, where it
    becomes the qdisc's TCA_RATE (a rate estimator's parameters), which the kernel refuses with ERANGE
    (found in the stock-kernel guest, `testbed shape --serialize`). Its tbf plugin drops it the same
    way, after reading it."""
    request.pop("rate", None)


if not hasattr(sched_netem, "fix_request"):  # a pyroute2 that fixes it keeps its own
    sched_netem.fix_request = _netem_request


def link_counters(link) -> dict[str, int]:
    """Bytes and packets a port has sent, from a link message's IFLA_STATS64 (the kernel's own count,
    shaped or not). Takes anything with pyroute2's `get_attr`, so a captured message tests it."""
    stats = link.get_attr("IFLA_STATS64") or link.get_attr("IFLA_STATS") or {}
    return {"bytes": int(stats.get("tx_bytes", 0)), "packets": int(stats.get("tx_packets", 0))}


def class_counters(stats2) -> dict[str, int]:
    """Bytes, packets, drops, overlimits and backlog from a class's TCA_STATS2 attribute.

    Takes anything with pyroute2's `get_attr`, so a captured message tests it without a kernel.
    """
    basic = stats2.get_attr("TCA_STATS_BASIC") or {}
    queue = stats2.get_attr("TCA_STATS_QUEUE") or {}
    return {
        "bytes": int(basic.get("bytes", 0)),
        "packets": int(basic.get("packets", 0)),
        "drops": int(queue.get("drops", 0)),
        "overlimits": int(queue.get("overlimits", 0)),
        "backlog": int(queue.get("backlog", 0)),
    }


def _class_rates(cls) -> dict[str, int]:
    """An HTB class's rate and ceil in bits/s, from its TCA_OPTIONS."""
    opts = cls.get_attr("TCA_OPTIONS")
    parms = opts.get_attr("TCA_HTB_PARMS")
    # above 32 bits of bytes/s the kernel keeps the rate in a 64-bit attribute of its own
    rate = opts.get_attr("TCA_HTB_RATE64") or parms["rate"]
    ceil = opts.get_attr("TCA_HTB_CEIL64") or parms["ceil"]
    return {"rate": rate * 8, "ceil": ceil * 8}


@dataclass(frozen=True)
class _Port:
    """What `Shaper._check` reads of a port: its name, and whether it needs netem."""

    ifname: str
    netem: bool = False

    @property
    def needs_netem(self) -> bool:
        return self.netem


class Shaper:
    """Plans, applies and reads shaping in one network namespace (None: the current one).

    `connect` opens the netlink socket (a context manager with pyroute2's `IPRoute` methods); tests
    pass a recording double. `local`: the ports are in this process's own namespace (the host agent's
    case), so their names resolve with `if_nametoindex` (microseconds) instead of a netlink request
    (half a millisecond, and the sweep reads the classes after every trial).
    """

    def __init__(
        self, netns: str | None = None, connect: Callable | None = None, local: bool = False
    ) -> None:
        self.netns = netns
        self._connect = connect
        self._local = local and netns is None

    def _lookup(self, ipr, ifname: str) -> int | None:
        """The interface's index, or None where there is no such interface."""
        if not self._local:
            found = ipr.link_lookup(ifname=ifname)
            return found[0] if found else None
        try:
            return socket.if_nametoindex(ifname)
        except OSError:
            return None

    def _ipr(self):
        if self._connect is not None:
            return self._connect()
        return NetNS(self.netns) if self.netns else IPRoute()

    def netem_available(self) -> bool:
        with self._ipr() as ipr:
            return self._netem_available(ipr)

    @staticmethod
    def _netem_available(ipr) -> bool:
        """Probe for sch_netem on the namespace's loopback (ours to touch), leaving nothing behind.
        The probe's qdisc is removed as the root one (`parent`), as `clear` removes ours: a delete by
        handle alone is refused with EINVAL by a kernel that has netem (found in the stock-kernel
        guest, `testbed guest`, the first kernel with netem these tests met)."""
        lo = ipr.link_lookup(ifname="lo")[0]
        try:
            ipr.tc("add", "netem", lo, handle="1:", delay=1000)
        except NetlinkError as exc:
            if exc.code in (2, 95):  # ENOENT / EOPNOTSUPP: the qdisc kind is unknown
                return False
            raise
        ipr.tc("del", index=lo, handle="1:", parent=0xFFFFFFFF)
        return True

    def _check(self, ipr, plan: list[PortShaping]) -> dict[str, int]:
        """Everything that can fail before anything is changed, so nothing is half-applied; returns
        each port's interface index (looked up once: each lookup is a netlink round trip)."""
        index = {}
        for port in plan:
            found = self._lookup(ipr, port.ifname)
            if found is None:
                raise UserError(f"appliance port {port.ifname} does not exist", "run testbed up first")
            index[port.ifname] = found
        if any(p.needs_netem for p in plan) and not self._netem_available(ipr):
            raise UserError(NETEM_MISSING, NETEM_FIX)
        return index

    def _state(self, ipr, ifname: str) -> PortState:
        found = self._lookup(ipr, ifname)
        return FRESH if found is None else self._state_of(ipr, found)

    @staticmethod
    def _state_of(ipr, index: int) -> PortState:
        qdiscs = ipr.get_qdiscs(index)
        htb = any(q.get_attr("TCA_KIND") == "htb" and q["handle"] == ROOT_ID for q in qdiscs)
        return PortState(
            exists=True,
            htb=htb,
            htb_class=htb
            and any(
                c.get_attr("TCA_KIND") == "htb" and c["handle"] == CLASS_ID for c in ipr.get_classes(index)
            ),
            netem=any(q.get_attr("TCA_KIND") == "netem" and q["parent"] == CLASS_ID for q in qdiscs),
        )

    def states(self, plan: list[PortShaping]) -> dict[str, PortState]:
        """What each port of the plan holds now (a port that does not exist reads as `FRESH`)."""
        with self._ipr() as ipr:
            return {port.ifname: self._state(ipr, port.ifname) for port in plan}

    def plan(self, plan: list[PortShaping], states: dict[str, PortState] | None = None) -> list[TcOp]:
        """The operations `apply` would perform now: from the plan and the ports' state in the kernel
        (read here unless given).

        A port that does not exist (the testbed is down) is planned as a fresh one, as `up` shapes it.
        """
        states = self.states(plan) if states is None else states
        return [op for port in plan for op in port_ops(port, states[port.ifname])]

    def apply(self, plan: list[PortShaping]) -> list[TcOp]:
        """Check, plan from the state now, execute exactly that list; returns what was executed.

        One netlink socket for all of it (opening one costs milliseconds, and a rate change between
        sweep cells is this call).
        """
        with self._ipr() as ipr:
            index = self._check(ipr, plan)
            ops = [op for port in plan for op in port_ops(port, self._state_of(ipr, index[port.ifname]))]
            self._execute(ipr, ops, index)
        return ops

    def indexes(self, ifnames: list[str]) -> dict[str, int]:
        """Each port's interface index, refused in one line where one does not exist (a replay
        looks them up once, before its first step)."""
        with self._ipr() as ipr:
            return self._check(ipr, [_Port(name) for name in ifnames])

    def check_netem(self) -> None:
        """Refuse in one line where the kernel has no netem (a trace with delay or loss needs it)."""
        with self._ipr() as ipr:
            self._check(ipr, [_Port("lo", netem=True)])

    def execute(self, ops: list[TcOp], index: dict[str, int]) -> None:
        """Execute these operations on ports already looked up (a replay's step: no state read)."""
        with self._ipr() as ipr:
            self._execute(ipr, ops, index)

    def counters(self, index: dict[str, int]) -> dict[str, dict]:
        """Our class's counters per port already looked up: one netlink request per port."""
        out: dict[str, dict] = {}
        with self._ipr() as ipr:
            for ifname, found in index.items():
                for cls in ipr.get_classes(found):
                    if cls.get_attr("TCA_KIND") == "htb" and cls["handle"] == CLASS_ID:
                        out[ifname] = class_counters(cls.get_attr("TCA_STATS2"))
        return out

    @staticmethod
    def _execute(ipr, ops: list[TcOp], index: dict[str, int]) -> None:
        """Each operation is one netlink request, in order: the only step that changes the kernel."""
        for op in ops:
            ipr.tc(op.action, op.kind, index[op.ifname], **op.netlink())

    def clear(self, ifnames: list[str]) -> None:
        """Remove our root qdisc from these ports (a missing port or qdisc is fine)."""
        with self._ipr() as ipr:
            for ifname in ifnames:
                found = ipr.link_lookup(ifname=ifname)
                if not found:
                    continue
                try:
                    ipr.tc("del", index=found[0], handle=ROOT_HANDLE, parent=0xFFFFFFFF)
                except NetlinkError as exc:
                    if exc.code not in (2, 22):
                        raise

    def classes(self, ifnames: list[str]) -> dict[str, dict]:
        """Per port with our HTB class: its rate and ceil (bits/s) and what it has sent so far: what a
        sweep reads after every trial to know the trial went through the shaping it asked for.

        Two netlink requests per port (its index, its classes): this runs once per trial.
        """
        out: dict[str, dict] = {}
        with self._ipr() as ipr:
            for ifname in ifnames:
                found = self._lookup(ipr, ifname)
                for cls in ipr.get_classes(found) if found is not None else ():
                    if cls.get_attr("TCA_KIND") == "htb" and cls["handle"] == CLASS_ID:
                        out[ifname] = {**_class_rates(cls), **class_counters(cls.get_attr("TCA_STATS2"))}
        return out

    def sent(self, ifnames: list[str]) -> dict[str, dict]:
        """Per port, what it has sent (`link_counters`): what a trial put on an unshaped link, where
        no HTB class counts it. A missing port is left out."""
        out: dict[str, dict] = {}
        with self._ipr() as ipr:
            for ifname in ifnames:
                index = self._lookup(ipr, ifname)
                for link in ipr.get_links(index) if index is not None else ():
                    out[ifname] = link_counters(link)
        return out

    def read(self, ifnames: list[str]) -> dict[str, dict]:
        """The shaping in force per port, as the kernel reports it (rates in bits/s)."""
        out: dict[str, dict] = {}
        with self._ipr() as ipr:
            for ifname in ifnames:
                found = ipr.link_lookup(ifname=ifname)
                if not found:
                    continue
                info: dict = {"htb": None, "netem": None}
                for cls in ipr.get_classes(found[0]):
                    if cls.get_attr("TCA_KIND") != "htb" or cls["handle"] != CLASS_ID:
                        continue
                    info["htb"] = _class_rates(cls)
                for q in ipr.get_qdiscs(found[0]):
                    if q.get_attr("TCA_KIND") == "netem":
                        info["netem"] = True
                out[ifname] = info
        return out
