"""Names, subnets and ports of its own for each privileged test, so that several test runs (and
testbeds) share one machine, as pyroute2's `nsname` fixture gives each test its own namespace.

A `Lease` is taken under an exclusive `flock` and recorded as a file in `LEASE_DIR`, which every
pytest process on the machine consults: a prefix, subnet or port another live lease holds is never
handed out again, and neither is one the machine already uses (a prefix with leftovers, a subnet
with an address or route, a port something listens on). A lease whose process died is taken back.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import socket
import subprocess
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from contracts.processes import alive
from contracts.stages import GRPC_SERVERS, TAGLESS_SERVERS

LEASE_DIR = Path(os.environ.get("TESTBED_TEST_LEASES", "/run/testbed-tests"))
# inventory.py takes a prefix of at most 6 characters (interface names are limited to 15, and the
# longest the tool makes is PREFIX-client); "t" and 5 letters/digits leave ~60 million prefixes
PREFIX_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"
PREFIX_LENGTH = 6
SUBNETS = "10.201"  # each lease's subnets are 10.201.N.0/24, N in 0..255


SPAN = len(GRPC_SERVERS) + len(TAGLESS_SERVERS)  # the ports from the gRPC port on that a lease holds


@dataclass(frozen=True)
class Lease:
    """One privileged test's own testbed identity: a prefix, /24 subnets and TCP ports."""

    prefix: str
    subnets: tuple[str, ...]  # "10.201.N", each a /24 of its own
    ports: tuple[int, ...]  # free TCP ports on this machine, none another lease holds

    @property
    def tagless_port(self) -> int:
        """The tagless servers' first port: after the gRPC servers' (the third port's span)."""
        return self.ports[2] + len(GRPC_SERVERS)

    @property
    def net(self) -> str:
        """The first subnet (the embedded testbed's data plane)."""
        return self.subnets[0]

    def name(self, suffix: str) -> str:
        """What the tool calls one of the testbed's things (as `Inventory.resource`): PREFIX-suffix."""
        return f"{self.prefix}-{suffix}"

    def address(self, host: int, subnet: int = 0) -> str:
        return f"{self.subnets[subnet]}.{host}"


@contextmanager
def _locked() -> Iterator[Path]:
    LEASE_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(LEASE_DIR / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield LEASE_DIR
    finally:
        os.close(fd)  # releases the lock


def _live_leases(directory: Path) -> list[Lease]:
    """The leases of live processes; those of dead ones are removed (their process cannot release them)."""
    live = []
    for path in directory.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if alive(record["pid"]):
            live.append(Lease(record["prefix"], tuple(record["subnets"]), tuple(record["ports"])))
        else:
            path.unlink(missing_ok=True)
    return live


def _subnets_in_use() -> set[str]:
    """The 10.201.N subnets this machine's root namespace has an address or a route in."""
    shown = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    shown += subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    return {f"{SUBNETS}.{n}" for n in range(256) if f"{SUBNETS}.{n}." in shown}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def take(subnets: int = 1, ports: int = 3, test: str = "", replicas: int = 1) -> Lease:
    """A new lease: a prefix nobody uses, `subnets` free /24s and `ports` free TCP ports. With
    `replicas`, a prefix one shorter whose replicas' prefixes (it and a digit) nobody uses either."""
    with _locked() as directory:
        live = _live_leases(directory)
        taken_prefixes = {lease.prefix for lease in live}
        taken_subnets = {s for lease in live for s in lease.subnets} | _subnets_in_use()
        taken_ports = {p for lease in live for p in lease.ports}
        rng = random.SystemRandom()
        while True:
            length = PREFIX_LENGTH - (replicas > 1)
            prefix = "t" + "".join(rng.choice(PREFIX_CHARS) for _ in range(length - 1))
            names = [prefix] + [f"{prefix}{i}" for i in range(1, replicas)]
            if not any(n in taken_prefixes or leftovers(n) for n in names):
                break
        free = [f"{SUBNETS}.{n}" for n in range(256) if f"{SUBNETS}.{n}" not in taken_subnets]
        if len(free) < subnets:
            raise RuntimeError(f"no {subnets} free /24 subnets left in {SUBNETS}.0.0/16")
        chosen_ports: list[int] = []
        reserved: list[int] = []  # held too, after the chosen ones
        while len(chosen_ports) < ports:
            port = _free_port()
            # the third port is the gRPC port: the other languages' servers take the ones after it, and
            # the tagless servers the ones after those (`Lease.tagless_port`)
            span = list(range(port, port + SPAN)) if len(chosen_ports) == 2 else [port]
            if (
                not set(span) & (taken_ports | {*chosen_ports, *reserved})
                and port >= 1024
                and span[-1] <= 65535
            ):
                chosen_ports.append(port)
                reserved += span[1:]
        lease = Lease(prefix, tuple(rng.sample(free, subnets)), tuple(chosen_ports + reserved))
        (directory / f"{prefix}.json").write_text(
            json.dumps({**asdict(lease), "pid": os.getpid(), "test": test})
        )
        return lease


def give_back(lease: Lease) -> None:
    with _locked() as directory:
        (directory / f"{lease.prefix}.json").unlink(missing_ok=True)


INVENTORY = """\
backend: netns
prefix: {prefix}
hosts:
  - role: client
    name: client
    address: {net}.1/24
  - role: appliance
    name: appliance
  - role: server
    name: server
    address: {net}.2/24
link:
  rate: 100mbit
client_cpu:
  cpu_quota: {quota}
services:
  server_port: {port}
  iperf3_port: {iperf_port}
  grpc_port: {grpc_port}
  tagless_port: {tagless_port}
"""


def write_inventory(path: Path, lease: Lease, quota: float = 0.5) -> Path:
    """An embedded testbed's inventory with the lease's prefix, first subnet and first three ports."""
    server_port, iperf_port, grpc_port = lease.ports[:3]
    text = INVENTORY.format(
        prefix=lease.prefix,
        net=lease.net,
        quota=quota,
        port=server_port,
        iperf_port=iperf_port,
        grpc_port=grpc_port,
        tagless_port=lease.tagless_port,
    )
    path.write_text(textwrap.dedent(text))
    return path


def leftovers(prefix: str) -> list[str]:
    """Everything of a testbed with this prefix still on the machine."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
    found += [f"netns {line.split()[0]}" for line in netns if line.startswith(f"{prefix}-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [
        f"link {line.split(':')[1].strip()}"
        for line in links.splitlines()
        if line.split(":")[1].strip().split("@")[0].startswith(f"{prefix}-")
    ]
    for root in (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")):  # every client's, several included
        found += [f"cgroup {cg}" for cg in sorted(root.glob(f"{prefix}-client*")) if cg.is_dir()]
    procs = subprocess.run(["pgrep", "-af", f"/run/testbed/{prefix}/"], capture_output=True, text=True).stdout
    found += [f"process {line}" for line in procs.splitlines()]
    for state in (Path(f"/run/testbed/{prefix}"), Path(f"/var/lib/testbed/{prefix}")):
        if state.exists():
            found.append(f"state {state}")
    return found
