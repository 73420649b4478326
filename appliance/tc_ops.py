"""The tc operations a shaping change is made of: one list, printed for a dry run, executed for real.

A `TcOp` is one netlink request (what `Shaper.execute` hands to pyroute2) and renders as the `tc`
command that makes the same request, so what `--dry-run` prints is what the host applies (tcconfig's
command history is the model). `port_ops` decides the list from a port's plan and the state its
egress port is in now (`PortState`: is our HTB there, is netem under it); it is pure, so every case is
tested without root.
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT_HANDLE = "1:"
CLASS_HANDLE = "1:10"
NETEM_HANDLE = "10:"
DEFAULT_CLASS = 0x10  # unclassified traffic goes to 1:10
ROOT_ID = 0x10000  # 1:
CLASS_ID = 0x10010  # 1:10

# action -> how tc names it: (object, verb)
_TC_WORDS = {
    "replace": ("qdisc", "replace"),
    "del": ("qdisc", "del"),
    "add-class": ("class", "add"),
    "change-class": ("class", "change"),
}


def exact_rate(bps: int) -> str:
    """A rate as tc reads it, never rounded: the largest bit unit that divides it."""
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps % scale == 0:
            return f"{bps // scale}{unit}"
    return f"{bps}bit"


@dataclass(frozen=True)
class TcOp:
    """One change to one port's traffic control.

    `params` are in tc's own terms (rates in bits/s, bursts in bytes, delay in ms, loss in %), in the
    order tc prints them; `netlink()` turns them into pyroute2's keyword arguments.
    """

    action: str  # replace | del | add-class | change-class
    kind: str  # htb | netem
    ifname: str
    handle: str  # "1:", "1:10", "10:"
    parent: str | None = None  # None: the root
    params: tuple[tuple[str, int | float], ...] = ()

    def tc(self) -> str:
        what, verb = _TC_WORDS[self.action]
        where = f"parent {self.parent}" if self.parent else "root"
        ident = "classid" if what == "class" else "handle"
        words = [f"tc {what} {verb} dev {self.ifname} {where} {ident} {self.handle} {self.kind}"]
        words += [_tc_param(key, value) for key, value in self.params]
        return " ".join(words)

    def netlink(self) -> dict:
        """Keyword arguments of `IPRoute.tc(action, kind, index, **kwargs)` for this operation."""
        kwargs: dict = {"handle": self.handle}
        if self.parent:
            kwargs["parent"] = self.parent
        for key, value in self.params:
            if key in ("rate", "ceil"):
                kwargs[key] = f"{value}bit"
            elif key == "delay":
                kwargs[key] = int(round(value * 1000))  # pyroute2 takes microseconds
            else:
                kwargs[key] = value
        return kwargs

    def as_dict(self) -> dict:
        return {
            "action": self.action,
            "kind": self.kind,
            "ifname": self.ifname,
            "handle": self.handle,
            "parent": self.parent,
            "params": dict(self.params),
            "tc": self.tc(),
        }


def _tc_param(key: str, value: int | float) -> str:
    if key in ("rate", "ceil"):
        return f"{key} {exact_rate(int(value))}"
    if key in ("burst", "cburst"):
        return f"{key} {value}b"
    if key == "default":
        return f"default {value:x}"  # tc reads a class minor in hex
    if key == "delay":
        return f"delay {value:g}ms"
    if key == "loss":
        return f"loss {value:g}%"
    return f"{key} {value}"


@dataclass(frozen=True)
class PortState:
    """What of ours an egress port holds now, as read from the kernel."""

    exists: bool = True
    htb: bool = False  # our HTB root qdisc (1:)
    htb_class: bool = False  # its class 1:10
    netem: bool = False  # a netem qdisc under 1:10


FRESH = PortState(exists=False)


def port_ops(port, state: PortState) -> list[TcOp]:
    """The operations that bring one port from `state` to `port` (an `appliance.shaper.PortShaping`).

    An HTB root in place keeps its qdisc: the class is changed in place (the cheap path between sweep
    cells) or added; anything else at the root is replaced by our HTB, which takes its children with
    it. netem is replaced (created or changed) when delay, loss or serialization is asked for, and
    deleted when it is not but is there.
    """
    ops = []
    htb = (
        ("rate", port.rate),
        ("ceil", port.ceil),
        ("burst", port.burst),
        ("cburst", port.cburst),
        ("quantum", port.quantum),
    )
    netem_there = state.netem
    if not state.htb:
        ops.append(TcOp("replace", "htb", port.ifname, ROOT_HANDLE, None, (("default", DEFAULT_CLASS),)))
        netem_there = False  # the old root went, and everything under it
    if state.htb and state.htb_class:
        ops.append(TcOp("change-class", "htb", port.ifname, CLASS_HANDLE, ROOT_HANDLE, htb))
    else:
        ops.append(TcOp("add-class", "htb", port.ifname, CLASS_HANDLE, ROOT_HANDLE, htb))
        netem_there = False
    if port.needs_netem:
        netem: list[tuple[str, int | float]] = []
        if port.delay_ms:
            netem.append(("delay", port.delay_ms))
        if port.loss_pct:
            netem.append(("loss", port.loss_pct))
        if port.serialize:
            netem.append(("rate", port.rate))
        netem.append(("limit", port.netem_limit))
        ops.append(TcOp("replace", "netem", port.ifname, NETEM_HANDLE, CLASS_HANDLE, tuple(netem)))
    elif netem_there:
        ops.append(TcOp("del", "netem", port.ifname, NETEM_HANDLE, CLASS_HANDLE))
    return ops
