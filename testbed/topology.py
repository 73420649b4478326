"""The embedded testbed's wiring: three namespaces and two veth pairs through the appliance.

client [c0] <-veth-> [a0] appliance bridge [a1] <-veth-> [s0] server

`plan` lists the steps (printable as `ip` commands, testable without root); `apply` performs them with
pyroute2. Every name carries the inventory's prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyroute2 import IPRoute, NetNS, netns
from pyroute2.netlink.exceptions import NetlinkError

from testbed.inventory import Inventory


@dataclass(frozen=True)
class Names:
    """Every kernel object of one testbed, derived from the inventory alone (so `down` needs no state)."""

    client_ns: str
    appliance_ns: str
    server_ns: str
    client_if: str
    server_if: str
    to_client: str  # appliance port facing the client: server->client traffic leaves here
    to_server: str  # appliance port facing the server: client->server traffic leaves here
    bridge: str
    cgroup: str

    @classmethod
    def of(cls, inv: Inventory) -> Names:
        r = inv.resource
        return cls(
            client_ns=r(inv.host("client").name),
            appliance_ns=r(inv.host("appliance").name),
            server_ns=r(inv.host("server").name),
            client_if=r("c0"),
            server_if=r("s0"),
            to_client=r("a0"),
            to_server=r("a1"),
            bridge=r("br0"),
            cgroup=r("client"),
        )

    @property
    def namespaces(self) -> tuple[str, str, str]:
        return (self.client_ns, self.appliance_ns, self.server_ns)

    @property
    def links(self) -> tuple[str, ...]:
        return (self.client_if, self.server_if, self.to_client, self.to_server)


@dataclass(frozen=True)
class Step:
    kind: str  # netns | veth | addr | up | mtu
    ns: str
    ifname: str = ""
    peer: str = ""
    peer_ns: str = ""
    address: str = ""
    mtu: int = 0

    def __str__(self) -> str:
        if self.kind == "netns":
            return f"ip netns add {self.ns}"
        if self.kind == "veth":
            return f"ip link add {self.ifname} netns {self.ns} type veth peer name {self.peer} netns {self.peer_ns}"
        if self.kind == "addr":
            return f"ip -n {self.ns} addr add {self.address} dev {self.ifname}"
        if self.kind == "mtu":
            return f"ip -n {self.ns} link set {self.ifname} mtu {self.mtu}"
        return f"ip -n {self.ns} link set {self.ifname} up"


def plan(inv: Inventory) -> list[Step]:
    n = Names.of(inv)
    mtu = inv.link.mtu
    steps = [Step("netns", ns) for ns in n.namespaces]
    steps += [
        Step("veth", n.client_ns, n.client_if, n.to_client, n.appliance_ns),
        Step("veth", n.server_ns, n.server_if, n.to_server, n.appliance_ns),
        Step("addr", n.client_ns, n.client_if, address=str(inv.host("client").address)),
        Step("addr", n.server_ns, n.server_if, address=str(inv.host("server").address)),
    ]
    for ns in n.namespaces:
        steps.append(Step("up", ns, "lo"))
    for ns, ifname in (
        (n.client_ns, n.client_if),
        (n.appliance_ns, n.to_client),
        (n.appliance_ns, n.to_server),
        (n.server_ns, n.server_if),
    ):
        steps.append(Step("mtu", ns, ifname, mtu=mtu))
        steps.append(Step("up", ns, ifname))
    return steps


def apply(steps: list[Step]) -> None:
    for step in steps:
        if step.kind == "netns":
            if step.ns not in netns.listnetns():
                netns.create(step.ns)
        elif step.kind == "veth":
            _add_veth(step)
        else:
            with NetNS(step.ns) as ns:
                index = ns.link_lookup(ifname=step.ifname)[0]
                if step.kind == "addr":
                    addr, plen = step.address.split("/")
                    try:
                        ns.addr("add", index=index, address=addr, prefixlen=int(plen))
                    except NetlinkError as exc:
                        if exc.code != 17:  # EEXIST: up run twice
                            raise
                elif step.kind == "mtu":
                    ns.link("set", index=index, mtu=step.mtu)
                else:
                    ns.link("set", index=index, state="up")


def _add_veth(step: Step) -> None:
    with NetNS(step.ns) as ns:
        if ns.link_lookup(ifname=step.ifname):
            return
    # created in the root namespace, then each end is moved: one fewer namespace switch than any other order
    with IPRoute() as ipr:
        ipr.link("add", ifname=step.ifname, kind="veth", peer=step.peer)
        ipr.link("set", index=ipr.link_lookup(ifname=step.ifname)[0], net_ns_fd=step.ns)
        ipr.link("set", index=ipr.link_lookup(ifname=step.peer)[0], net_ns_fd=step.peer_ns)


def remove_root_leftovers(names: Names) -> list[str]:
    """veth ends left in the root namespace by an `up` that died between creating and moving them."""
    removed = []
    with IPRoute() as ipr:
        for ifname in names.links:
            for index in ipr.link_lookup(ifname=ifname):
                ipr.link("del", index=index)
                removed.append(ifname)
    return removed


def existing_namespaces(names: Names) -> list[str]:
    present = set(netns.listnetns())
    return [ns for ns in names.namespaces if ns in present]
