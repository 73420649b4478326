"""Shaping the appliance's egress ports with HTB (and netem where the kernel has it).

`plan_shaping` turns a LinkSpec into the qdiscs and classes to install and can be printed as the
equivalent `tc` commands without root; `Shaper.apply` is the only place that talks to the kernel
(netlink through pyroute2). A rate change between sweep cells is an in-place `tc class change`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyroute2 import IPRoute, NetNS
from pyroute2.netlink.exceptions import NetlinkError

from contracts.errors import UserError
from contracts.profiles import LinkSpec
from contracts.units import ETH_HEADER, default_burst, format_rate, kernel_hz

ROOT_HANDLE = "1:"
CLASS_HANDLE = "1:10"
NETEM_HANDLE = "10:"
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

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay_ms) or bool(self.loss_pct)

    def commands(self) -> list[str]:
        """The equivalent tc commands, for --dry-run and for people reading the plan."""
        dev = f"dev {self.ifname}"
        cmds = [
            f"tc qdisc replace {dev} root handle {ROOT_HANDLE} htb default 10",
            f"tc class replace {dev} parent {ROOT_HANDLE} classid {CLASS_HANDLE} htb rate {format_rate(self.rate)} "
            f"ceil {format_rate(self.ceil)} burst {self.burst}b cburst {self.cburst}b quantum {self.quantum}",
        ]
        if self.needs_netem:
            opts = []
            if self.delay_ms:
                opts.append(f"delay {self.delay_ms:g}ms")
            if self.loss_pct:
                opts.append(f"loss {self.loss_pct:g}%")
            cmds.append(
                f"tc qdisc replace {dev} parent {CLASS_HANDLE} handle {NETEM_HANDLE} netem "
                f"{' '.join(opts)} limit {self.netem_limit}"
            )
        return cmds


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
        if link.delay_ms or link.loss_pct:
            # enough packets to hold rate x delay (the bandwidth-delay product), with headroom
            bdp_packets = rate / 8 * (link.delay_ms or 0) / 1000 / (link.mtu + ETH_HEADER)
            limit = max(1000, math.ceil(bdp_packets * 2))
        ports.append(
            PortShaping(
                ifname, direction, rate, ceil, burst, cburst, quantum, link.delay_ms, link.loss_pct, limit
            )
        )
    return ports


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


class Shaper:
    """Applies and reads shaping in one network namespace (None: the current one)."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    def _ipr(self):
        return NetNS(self.netns) if self.netns else IPRoute()

    def netem_available(self) -> bool:
        """Probe for sch_netem on the namespace's loopback (ours to touch), leaving nothing behind."""
        with self._ipr() as ipr:
            lo = ipr.link_lookup(ifname="lo")[0]
            try:
                ipr.tc("add", "netem", lo, handle="1:", delay=1000)
            except NetlinkError as exc:
                if exc.code in (2, 95):  # ENOENT / EOPNOTSUPP: the qdisc kind is unknown
                    return False
                raise
            ipr.tc("del", index=lo, handle="1:")
            return True

    def check(self, plan: list[PortShaping]) -> None:
        """Everything that can fail before anything is changed, so nothing is half-applied."""
        with self._ipr() as ipr:
            for port in plan:
                if not ipr.link_lookup(ifname=port.ifname):
                    raise UserError(f"appliance port {port.ifname} does not exist", "run testbed up first")
        if any(p.needs_netem for p in plan) and not self.netem_available():
            raise UserError(
                "delay/loss need netem, but this kernel has no sch_netem module (CONFIG_NET_SCH_NETEM)",
                "drop --delay/--loss, or use a kernel with sch_netem (modprobe sch_netem)",
            )

    def apply(self, plan: list[PortShaping]) -> None:
        self.check(plan)
        with self._ipr() as ipr:
            for port in plan:
                index = ipr.link_lookup(ifname=port.ifname)[0]
                htb = dict(
                    rate=f"{port.rate}bit",
                    ceil=f"{port.ceil}bit",
                    burst=port.burst,
                    cburst=port.cburst,
                    quantum=port.quantum,
                )
                if self._has_htb(ipr, index):
                    # the cheap path between sweep cells: change the class in place
                    ipr.tc("change-class", "htb", index, handle=CLASS_HANDLE, parent=ROOT_HANDLE, **htb)
                else:
                    ipr.tc("replace", "htb", index, handle=ROOT_HANDLE, default=0x10)
                    ipr.tc("add-class", "htb", index, handle=CLASS_HANDLE, parent=ROOT_HANDLE, **htb)
                self._set_netem(ipr, index, port)

    @staticmethod
    def _has_htb(ipr, index: int) -> bool:
        for qdisc in ipr.get_qdiscs(index):
            if qdisc.get_attr("TCA_KIND") == "htb" and qdisc["handle"] == 0x10000:
                return any(c["handle"] == 0x10010 for c in ipr.get_classes(index))
        return False

    @staticmethod
    def _set_netem(ipr, index: int, port: PortShaping) -> None:
        has = any(q.get_attr("TCA_KIND") == "netem" for q in ipr.get_qdiscs(index))
        if port.needs_netem:
            ipr.tc(
                "replace",
                "netem",
                index,
                parent=CLASS_HANDLE,
                handle=NETEM_HANDLE,
                delay=int((port.delay_ms or 0) * 1000),
                loss=port.loss_pct or 0,
                limit=port.netem_limit,
            )
        elif has:
            ipr.tc("del", "netem", index, parent=CLASS_HANDLE, handle=NETEM_HANDLE)

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

    def counters(self, ifnames: list[str]) -> dict[str, dict]:
        """Per port, what our HTB class has sent and dropped so far (exact, read from the kernel)."""
        out: dict[str, dict] = {}
        with self._ipr() as ipr:
            for ifname in ifnames:
                found = ipr.link_lookup(ifname=ifname)
                for cls in ipr.get_classes(found[0]) if found else ():
                    if cls.get_attr("TCA_KIND") == "htb" and cls["handle"] == 0x10010:
                        out[ifname] = class_counters(cls.get_attr("TCA_STATS2"))
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
                    if cls.get_attr("TCA_KIND") != "htb" or cls["handle"] != 0x10010:
                        continue
                    opts = cls.get_attr("TCA_OPTIONS")
                    parms = opts.get_attr("TCA_HTB_PARMS")
                    # above 32 bits of bytes/s the kernel keeps the rate in a 64-bit attribute of its own
                    rate = opts.get_attr("TCA_HTB_RATE64") or parms["rate"]
                    ceil = opts.get_attr("TCA_HTB_CEIL64") or parms["ceil"]
                    info["htb"] = {"rate": rate * 8, "ceil": ceil * 8}
                for q in ipr.get_qdiscs(found[0]):
                    if q.get_attr("TCA_KIND") == "netem":
                        info["netem"] = True
                out[ifname] = info
        return out
