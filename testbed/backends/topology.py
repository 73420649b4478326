"""The embedded testbed's wiring: three namespaces and two veth pairs through the appliance.

client [c0] <-veth-> [a0] appliance bridge [a1] <-veth-> [s0] server

With several clients (`testbed up --clients N`) each further client k has its namespace, its veth
[ck] <-> [ack] and its cgroup, and the appliance has two bridges joined by a veth trunk, so that one
port carries every client's traffic each way (the shared bottleneck):

client  [c0] <-> [a0]  \
client2 [c1] <-> [ac1]  br0 [t0] <-veth trunk-> [t1] br1 [a1] <-> [s0] server
...                    /

client->server traffic is shaped where it leaves a1 (as with one client), server->client traffic
where it leaves t1 toward the clients' bridge (with one client: where it leaves a0).

`plan` lists the steps (printable as `ip` commands, testable without root); `apply` performs them with
pyroute2. Every name carries the inventory's prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pyroute2 import IPRoute, NetNS, netns
from pyroute2.netlink.exceptions import NetlinkError

from testbed.inventory import Inventory


@dataclass(frozen=True)
class ClientNames:
    """One client host's kernel objects."""

    role: str  # client, client2, ...
    ns: str
    ifname: str  # its end of its veth, in its namespace
    port: str  # the appliance's end: its port on the clients' bridge
    cgroup: str  # its CPU limit


@dataclass(frozen=True)
class Names:
    """Every kernel object of one testbed, derived from the inventory alone (so `down` needs no state)."""

    client_ns: str
    appliance_ns: str
    server_ns: str
    client_if: str
    server_if: str
    to_client: str  # appliance port facing the (first) client
    to_server: str  # appliance port facing the server: client->server traffic leaves here
    bridge: str
    cgroup: str
    clients: tuple[ClientNames, ...] = ()  # every client host, the first included
    trunk: tuple[str, str] = (
        "",
        "",
    )  # several clients: the trunk's ends on the clients' and server's bridges
    server_bridge: str = ""  # several clients: the bridge of the server's port and the trunk

    @classmethod
    def of(cls, inv: Inventory, clients: int | None = None) -> Names:
        """`clients`: as many client hosts' names (default: the inventory's); `down` asks for the most
        a testbed can have, since it cannot know how many the last `up` brought up."""
        r = inv.resource
        n = inv.clients if clients is None else clients
        name = inv.host("client").name
        hosts = tuple(
            ClientNames(
                role="client" if k == 0 else f"client{k + 1}",
                ns=r(name if k == 0 else f"{name}{k + 1}"),
                ifname=r(f"c{k}"),
                port=r("a0" if k == 0 else f"ac{k}"),
                cgroup=r("client" if k == 0 else f"client{k + 1}"),
            )
            for k in range(n)
        )
        several = n > 1
        return cls(
            client_ns=hosts[0].ns,
            appliance_ns=r(inv.host("appliance").name),
            server_ns=r(inv.host("server").name),
            client_if=hosts[0].ifname,
            server_if=r("s0"),
            to_client=hosts[0].port,
            to_server=r("a1"),
            bridge=r("br0"),
            cgroup=hosts[0].cgroup,
            clients=hosts,
            trunk=(r("t0"), r("t1")) if several else ("", ""),
            server_bridge=r("br1") if several else "",
        )

    @property
    def down_port(self) -> str:
        """The port server->client traffic is shaped on: the client's, or with several clients the
        trunk's end on the server's bridge (every client's traffic passes it)."""
        return self.trunk[1] or self.to_client

    @property
    def bridges(self) -> dict[str, list[str]]:
        """Each appliance bridge and its ports, the clients' bridge first."""
        if not self.server_bridge:
            return {self.bridge: [self.to_client, self.to_server]}
        return {
            self.bridge: [*(c.port for c in self.clients), self.trunk[0]],
            self.server_bridge: [self.trunk[1], self.to_server],
        }

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (*(c.ns for c in self.clients), self.appliance_ns, self.server_ns)

    @property
    def links(self) -> tuple[str, ...]:
        trunk = tuple(t for t in self.trunk if t)
        return (
            *(c.ifname for c in self.clients),
            self.server_if,
            *(c.port for c in self.clients),
            self.to_server,
            *trunk,
        )


class StepKind(StrEnum):
    """What a wiring step makes: a namespace, a veth pair, an address, a link up, an MTU."""

    NETNS = "netns"
    VETH = "veth"
    ADDR = "addr"
    UP = "up"
    MTU = "mtu"


@dataclass(frozen=True)
class Step:
    kind: StepKind
    ns: str
    ifname: str = ""
    peer: str = ""
    peer_ns: str = ""
    address: str = ""
    mtu: int = 0

    def __str__(self) -> str:
        if self.kind == StepKind.NETNS:
            return f"ip netns add {self.ns}"
        if self.kind == StepKind.VETH:
            return f"ip link add {self.ifname} netns {self.ns} type veth peer name {self.peer} netns {self.peer_ns}"
        if self.kind == StepKind.ADDR:
            return f"ip -n {self.ns} addr add {self.address} dev {self.ifname}"
        if self.kind == StepKind.MTU:
            return f"ip -n {self.ns} link set {self.ifname} mtu {self.mtu}"
        return f"ip -n {self.ns} link set {self.ifname} up"


def plan(inv: Inventory) -> list[Step]:
    n = Names.of(inv)
    mtu = inv.link.mtu
    steps = [Step(StepKind.NETNS, ns) for ns in n.namespaces]
    steps += [Step(StepKind.VETH, c.ns, c.ifname, c.port, n.appliance_ns) for c in n.clients]
    steps.append(Step(StepKind.VETH, n.server_ns, n.server_if, n.to_server, n.appliance_ns))
    if n.server_bridge:
        steps.append(Step(StepKind.VETH, n.appliance_ns, n.trunk[0], n.trunk[1], n.appliance_ns))
    steps += [Step(StepKind.ADDR, c.ns, c.ifname, address=str(inv.host(c.role).address)) for c in n.clients]
    steps.append(Step(StepKind.ADDR, n.server_ns, n.server_if, address=str(inv.host("server").address)))
    for ns in n.namespaces:
        steps.append(Step(StepKind.UP, ns, "lo"))
    for ns, ifname in ports(n):
        steps.append(Step(StepKind.MTU, ns, ifname, mtu=mtu))
        steps.append(Step(StepKind.UP, ns, ifname))
    return steps


def ports(n: Names) -> list[tuple[str, str]]:
    """Every interface of the testbed with its namespace: the clients', the appliance's, the server's."""
    out = [(c.ns, c.ifname) for c in n.clients]
    out += [(n.appliance_ns, port) for ports in n.bridges.values() for port in ports]
    return [*out, (n.server_ns, n.server_if)]


def apply(steps: list[Step]) -> None:
    for step in steps:
        if step.kind == StepKind.NETNS:
            if step.ns not in netns.listnetns():
                netns.create(step.ns)
        elif step.kind == StepKind.VETH:
            _add_veth(step)
        else:
            with NetNS(step.ns) as ns:
                index = ns.link_lookup(ifname=step.ifname)[0]
                if step.kind == StepKind.ADDR:
                    addr, plen = step.address.split("/")
                    try:
                        ns.addr("add", index=index, address=addr, prefixlen=int(plen))
                    except NetlinkError as exc:
                        if exc.code != 17:  # EEXIST: up run twice
                            raise
                elif step.kind == StepKind.MTU:
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
    """Those of the testbed's namespaces that exist now."""
    present = set(netns.listnetns())
    return [ns for ns in names.namespaces if ns in present]
