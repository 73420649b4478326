"""The testbed's description: hosts, link defaults, the client's CPU profile.

`inventory.yaml` is the single file a user edits. It is read and validated once by `load_inventory`
into the dataclasses below, which everything else receives.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, replace
from pathlib import Path

from contracts.config import Section, load_yaml
from contracts.errors import UserError
from contracts.hosts import Backend, Role
from contracts.profiles import MALLOC_ENV, CpuProfile, LinkSpec, blas_env, check_burst, check_cpu_quota
from contracts.stages import GRPC_SERVERS, TAGLESS_SERVERS, grpc_port
from contracts.units import parse_rate

ROLES = ("client", "appliance", "server")
BACKENDS = ("netns", "ssh")
_NAME = re.compile(r"^[a-z][a-z0-9]{0,9}$")
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?$")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
HOST_KEY_POLICIES = ("strict", "accept-new")
_PREFIX = re.compile(r"^[a-z][a-z0-9]{0,5}$")
_EXTRA_CLIENT = re.compile(r"^client([2-9]|1[0-6])$")  # client hosts after the first: client2 ...
MAX_CLIENTS = 16  # client hosts of a testbed (embedded: each a namespace, port and cgroup)
DEFAULT_INVENTORY = Path(__file__).resolve().parent.parent / "inventory.yaml"


@dataclass(frozen=True)
class SshSpec:
    """How the control machine reaches a host of a real lab."""

    host: str
    user: str = "root"
    port: int = 22
    key: str | None = None  # None: the SSH agent and ~/.ssh/config decide
    known_hosts: str = "~/.ssh/known_hosts"  # the host keys the host's key is checked against
    host_key: str = "strict"  # strict: unknown keys are refused; accept-new: recorded on first contact


@dataclass(frozen=True)
class HostSpec:
    role: str
    name: str
    address: ipaddress.IPv4Interface | None  # data-plane address; the appliance has none
    ssh: SshSpec | None = None  # backend ssh only
    interface: str | None = None  # backend ssh: the client's/server's data-plane NIC
    ports: tuple[str, str] | None = None  # backend ssh: the appliance's NICs facing client, server
    python: str = "python3"  # backend ssh: the interpreter that runs the roles there


@dataclass(frozen=True)
class Inventory:
    path: Path
    backend: str
    prefix: str
    hosts: dict[str, HostSpec]
    link: LinkSpec
    client_cpu: CpuProfile
    client_device: str | None  # a device profile (name or path) for experiments that name none
    server_device: str | None = None  # the server's device profile, likewise
    server_port: int = 8080
    iperf3_port: int = 5201
    grpc_port: int = 50051  # the server's gRPC transport (method grpc), next to server_port's HTTP
    tagless_port: int = 50061  # the server's tagless transport (contracts.tagless), C++'s on the next
    cpu_lock: str | None = None  # replicas on one host: the lock file around every timed CPU stage
    # a server device's BLAS threads, for every process of the server's that computes (None: the host's)
    server_blas_threads: int | None = None
    # client hosts on the appliance's bridge (`testbed up --clients N`), sharing one shaped link to the
    # server (`client_roles`): embedded, the inventory's client and N-1 more like it; an SSH lab's
    # first N of the client hosts its inventory lists (`listed_clients`)
    clients: int = 1

    def host(self, role: str) -> HostSpec:
        if role not in self.hosts and role in self.client_roles:
            return self._extra_client(self.client_roles.index(role))
        return self.hosts[role]

    @property
    def client_roles(self) -> tuple[str, ...]:
        """`client`, then `client2` ... `clientN`: each client host's role (the first is the inventory's)."""
        return ("client", *(f"client{k + 1}" for k in range(1, self.clients)))

    @property
    def listed_clients(self) -> tuple[str, ...]:
        """The roles of the client hosts the inventory itself lists: an SSH lab's machines (`client`,
        `client2` ...); the embedded testbed's one (its further clients are made: `_extra_client`)."""
        return _client_roles(self.hosts)

    def _extra_client(self, k: int) -> HostSpec:
        """Client k (1..N-1): the inventory's client named NAME<k+1>, at the k-th address of the subnet
        that neither the client nor the server has."""
        first, server = self.hosts["client"], self.hosts["server"]
        taken = {first.address.ip, server.address.ip}
        free = (ip for ip in first.address.network.hosts() if ip not in taken)
        ip = next(ip for i, ip in enumerate(free) if i == k - 1)
        address = ipaddress.IPv4Interface(f"{ip}/{first.address.network.prefixlen}")
        return replace(first, role=f"client{k + 1}", name=f"{first.name}{k + 1}", address=address)

    def with_clients(self, n: int) -> Inventory:
        """The inventory with `n` client hosts; refused in one line where it cannot have them."""
        if not 1 <= n <= MAX_CLIENTS:
            raise UserError(f"{n} clients: a testbed has 1 to {MAX_CLIENTS}", "ask for fewer clients")
        if self.backend == Backend.SSH:
            listed = len(self.listed_clients)
            if n > listed:
                raise UserError(
                    f"{n} clients: the SSH lab's inventory lists {listed} client host(s)",
                    "add a host with role client for each further client machine, or ask for fewer",
                )
            return replace(self, clients=n)
        network = self.hosts["client"].address.network
        if n - 1 > network.num_addresses - 4:  # network, broadcast, client, server
            raise UserError(
                f"{n} clients do not fit in {network}", "give the client and server a larger subnet"
            )
        names = {h.name for h in self.hosts.values()}
        clash = [f"{self.hosts['client'].name}{k + 1}" for k in range(1, n)]
        clash = [c for c in clash if c in names]
        if clash:
            raise UserError(
                f"client host name {clash[0]} is already another host's", "rename that host in the inventory"
            )
        return replace(self, clients=n)

    def resource(self, suffix: str) -> str:
        """The name of anything the tool creates: prefix-suffix, so `down` can find it after a crash."""
        return f"{self.prefix}-{suffix}"

    def with_client_cpu(self, profile: CpuProfile) -> Inventory:
        return replace(self, client_cpu=profile)

    def with_server_blas(self, threads: int | None) -> Inventory:
        return replace(self, server_blas_threads=threads)

    def server_env(self) -> dict[str, str]:
        """What every server process runs with: glibc's malloc keeping freed memory (`MALLOC_ENV`), and
        a server device's BLAS threads. The device computes
        with that many; and a BLAS thread left spinning after a product would be counted, by the
        process's CPU clock, in the stage after it (measured: 90 ms in a uJSON encode of 800x800)."""
        return blas_env(self.server_blas_threads) if self.server_blas_threads else dict(MALLOC_ENV)


def load_inventory(path: Path | str | None = None) -> Inventory:
    path = Path(path) if path else DEFAULT_INVENTORY
    doc = load_yaml(path, "inventory")
    doc.reject_unknown(
        {"backend", "prefix", "hosts", "link", "client_cpu", "client_device", "server_device", "services"}
    )
    backend = doc.get("backend", str, "netns")
    if backend not in BACKENDS:
        raise doc.error(
            "backend", f"unknown backend {backend!r}", "use netns (this machine) or ssh (a real lab)"
        )
    prefix = doc.get("prefix", str, "tb")
    if not _PREFIX.match(prefix):
        raise doc.error(
            "prefix",
            f"{prefix!r} must be 1-6 lowercase letters/digits starting with a letter",
            "interface names are limited to 15 characters; use e.g. tb",
        )
    hosts = _hosts(doc, backend)
    services = doc.section("services", default_empty=True)
    services.reject_unknown({"server_port", "iperf3_port", "grpc_port", "tagless_port"})
    return Inventory(
        path=path,
        backend=backend,
        prefix=prefix,
        hosts=hosts,
        link=parse_link(doc.section("link", default_empty=True)),
        client_cpu=parse_cpu_profile(doc.section("client_cpu", default_empty=True)),
        client_device=doc.get("client_device", str, None),
        server_device=doc.get("server_device", str, None),
        server_port=_port(services, "server_port", 8080),
        iperf3_port=_port(services, "iperf3_port", 5201),
        grpc_port=_grpc_port(services),
        tagless_port=_tagless_port(services),
    )


def _grpc_port(section: Section) -> int:
    """Python's gRPC port; the other languages' servers take the ports after it (grpc_port)."""
    taken = {
        "server_port": [section.get("server_port", int, 8080)],
        "iperf3_port": [section.get("iperf3_port", int, 5201)],
    }
    return _port_span(section, "grpc_port", 50051, "gRPC", GRPC_SERVERS, taken)


def _tagless_port(section: Section) -> int:
    """Python's tagless port; C++'s server takes the next (tagless_port)."""
    grpc = section.get("grpc_port", int, 50051)
    taken = {
        "server_port": [section.get("server_port", int, 8080)],
        "iperf3_port": [section.get("iperf3_port", int, 5201)],
        "grpc_port": [grpc_port(grpc, s) for s in GRPC_SERVERS],
    }
    return _port_span(section, "tagless_port", 50061, "tagless", TAGLESS_SERVERS, taken)


def _port_span(
    section: Section, key: str, default: int, transport: str, servers: tuple[str, ...], taken: dict
) -> int:
    """A transport's first port, its servers' on the ones after it: none of them one of `taken`'s
    (another service's ports, by key), nor past 65535."""
    port = _port(section, key, default)
    last = port + len(servers) - 1
    for other_key, ports in taken.items():
        if any(port <= other <= last for other in ports):
            raise section.error(
                key,
                f"{port}-{last} (the {transport} servers {', '.join(servers)}) include {other_key}'s port",
                f"give {transport} ports of their own",
            )
    if last > 65535:
        raise section.error(key, f"{port}-{last} go past 65535", f"give a lower {key}")
    return port


def _port(section: Section, key: str, default: int) -> int:
    port = section.get(key, int, default)
    if not 1024 <= port <= 65535:
        raise section.error(key, f"{port} is not a port between 1024 and 65535")
    return port


def _hosts(doc: Section, backend: str = "netns") -> dict[str, HostSpec]:
    hosts: dict[str, HostSpec] = {}
    for item in doc.sections("hosts"):
        item.reject_unknown(
            {"role", "name", "address"}
            | ({"ssh", "interface", "ports", "python"} if backend == Backend.SSH else set())
        )
        role = item.get("role", str)
        if role not in ROLES:
            raise item.error("role", f"unknown role {role!r}", f"use one of: {', '.join(ROLES)}")
        if (
            role == Role.CLIENT and role in hosts and backend == Backend.SSH
        ):  # an SSH lab's further client machine
            listed = len(_client_roles(hosts))
            if listed == MAX_CLIENTS:
                raise item.error("role", f"more than {MAX_CLIENTS} client hosts", "list at most that many")
            role = f"client{listed + 1}"
        elif role in hosts:
            fix = (
                "describe each role once (several clients: `clients:` in the experiment, or testbed up --clients N)"
                if role == Role.CLIENT
                else "describe each role once"
            )
            raise item.error("role", f"role {role!r} appears twice", fix)
        name = item.get("name", str)
        if not _NAME.match(name):
            raise item.error("name", f"{name!r} must be 1-10 lowercase letters/digits starting with a letter")
        address = None
        if role != Role.APPLIANCE:
            text = item.get("address", str)
            try:
                address = ipaddress.IPv4Interface(text)
            except ValueError:
                raise item.error(
                    "address",
                    f"{text!r} is not an IPv4 address with prefix length",
                    "write e.g. 10.77.0.1/24",
                ) from None
            if "/" not in text:
                raise item.error("address", f"{text!r} has no prefix length", "write e.g. 10.77.0.1/24")
        spec = HostSpec(role, name, address)
        if backend == Backend.SSH:
            spec = _ssh_fields(item, spec)
        hosts[role] = spec
    missing = [r for r in ROLES if r not in hosts]
    if missing:
        raise doc.error(
            "hosts", f"no host with role {', '.join(missing)}", "describe client, appliance and server"
        )
    names = [h.name for h in hosts.values()]
    if len(set(names)) != len(names):
        raise doc.error("hosts", "two hosts share a name", "give each host its own name")
    server = hosts["server"].address
    for role in _client_roles(hosts):
        client = hosts[role].address
        others = [h.address.ip for r, h in hosts.items() if r != role and h.address is not None]
        if client.network != server.network or client.ip in others:
            raise doc.error(
                "hosts",
                f"{hosts[role].name} {client}: the clients and server {server} need distinct addresses in one subnet",
                "the appliance is a switch, not a router",
            )
    return hosts


def _client_roles(hosts: dict[str, HostSpec]) -> tuple[str, ...]:
    return tuple(role for role in hosts if role == Role.CLIENT or _EXTRA_CLIENT.match(role))


def _ssh_fields(item: Section, spec: HostSpec) -> HostSpec:
    """What a real lab adds per host; every value that reaches a remote command is checked here."""
    ssh = item.section("ssh")
    ssh.reject_unknown({"host", "user", "port", "key", "known_hosts", "host_key"})
    host = ssh.get("host", str)
    if not _HOSTNAME.match(host):
        raise ssh.error("host", f"{host!r} is not a host name or address")
    user = ssh.get("user", str, "root")
    if not _USER.match(user):
        raise ssh.error("user", f"{user!r} is not a user name")
    port = ssh.get("port", int, 22)
    if not 1 <= port <= 65535:
        raise ssh.error("port", f"{port} is not a port")
    key = ssh.get("key", str, None)
    if key is not None and not Path(key).expanduser().is_file():
        raise ssh.error(
            "key", f"key file {key} does not exist", "give the private key's path or leave it out"
        )
    known_hosts = ssh.get("known_hosts", str, "~/.ssh/known_hosts")
    host_key = ssh.get("host_key", str, "strict")
    if host_key not in HOST_KEY_POLICIES:
        raise ssh.error(
            "host_key",
            f"unknown policy {host_key!r}",
            "use strict, or accept-new to record new keys on first contact",
        )
    python = item.get("python", str, "python3")
    if not re.match(r"^[A-Za-z0-9_./-]+$", python):
        raise item.error("python", f"{python!r} is not a program path")
    interface, ports = None, None
    if spec.role == Role.APPLIANCE:
        raw = item.get("ports", list)
        if len(raw) != 2 or not all(isinstance(p, str) and _IFNAME.match(p) for p in raw) or raw[0] == raw[1]:
            raise item.error(
                "ports",
                f"{raw!r} must be two interface names: the NIC facing the client, "
                "then the one facing the server",
            )
        ports = (raw[0], raw[1])
    else:
        interface = item.get("interface", str)
        if not _IFNAME.match(interface):
            raise item.error("interface", f"{interface!r} is not an interface name")
    return replace(
        spec,
        ssh=SshSpec(
            host,
            user,
            port,
            str(Path(key).expanduser()) if key else None,
            str(Path(known_hosts).expanduser()),
            host_key,
        ),
        interface=interface,
        ports=ports,
        python=python,
    )


def parse_link(sec: Section) -> LinkSpec:
    sec.reject_unknown({"rate", "up_rate", "down_rate", "ceil", "burst", "mtu", "delay_ms", "loss_pct"})
    rate = _rate(sec, "rate", "100mbit")
    up = _rate(sec, "up_rate", rate)
    down = _rate(sec, "down_rate", rate)
    ceil = _rate(sec, "ceil", None)
    burst = sec.get("burst", int, None)
    if burst is not None:
        _check(sec, "burst", check_burst, burst)
    mtu = sec.get("mtu", int, 1500)
    if not 576 <= mtu <= 9000:
        raise sec.error("mtu", f"{mtu} is not between 576 and 9000")
    delay = sec.get("delay_ms", float, None)
    loss = sec.get("loss_pct", float, None)
    if delay is not None and delay < 0:
        raise sec.error("delay_ms", "must not be negative")
    if loss is not None and not 0 <= loss <= 100:
        raise sec.error("loss_pct", "must be between 0 and 100")
    return LinkSpec(up, down, ceil, burst, mtu, delay, loss)


def _check(sec: Section, key: str, check, value) -> None:
    """A shared range check (contracts.profiles), reported with the file, line and key."""
    try:
        check(value)
    except UserError as exc:
        raise sec.error(key, exc.message, exc.fix) from None


def _rate(sec: Section, key: str, default: int | str | None) -> int | None:
    value = sec.data.get(key)
    if value is None:
        return parse_rate(default) if isinstance(default, str) else default
    try:
        return parse_rate(value, key)
    except UserError as exc:
        raise sec.error(key, exc.message, exc.fix) from None


def parse_cpu_profile(sec: Section) -> CpuProfile:
    sec.reject_unknown({"cpu_quota", "blas_threads", "blas_core"})
    quota = sec.get("cpu_quota", float, None)
    if quota is not None:
        _check(sec, "cpu_quota", check_cpu_quota, quota)
    threads = sec.get("blas_threads", int, 1)
    if threads < 1:
        raise sec.error("blas_threads", "must be at least 1")
    core = sec.get("blas_core", str, None)
    if core is not None and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{1,31}", core):
        raise sec.error(
            "blas_core", f"{core!r} is not an OpenBLAS core name", "e.g. Prescott, Core2, Haswell"
        )
    return CpuProfile(quota, threads, core)
