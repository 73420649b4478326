"""The testbed's life cycle: check, up, shape, status, down.

`BaseLab` holds what every backend shares (services, shaping plans, rate changes, status); the
embedded backend (`NetnsLab`, namespaces on this machine) and the SSH backend (`testbed.ssh_lab`)
supply how hosts, the bridge, the shaper and the CPU limit are reached. `down` derives every name
from the inventory, so it cleans up after a crash even when no state file survived.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, replace
from pathlib import Path

from appliance.shaper import PortShaping, Shaper, plan_shaping
from appliance.switch import PROGRAMS as OVS_PROGRAMS
from appliance.switch import SCHEMA, Switch
from client.cpulimit import CpuLimit, detect_version
from contracts.command import run
from contracts.errors import UserError
from contracts.profiles import LinkSpec
from testbed import topology
from testbed.hosts import Host, NetnsHost, blas_env
from testbed.inventory import Inventory
from testbed.topology import Names

STATE_ROOT = Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed"))
REQUIRED_PROGRAMS = ("ip", "ethtool", "iperf3", *OVS_PROGRAMS, "ovs-appctl")


def require_root() -> None:
    if os.geteuid() != 0:
        raise UserError(
            "testbed must run as root: it creates network namespaces, qdiscs and cgroups", "run it with sudo"
        )


def open_lab(inv: Inventory) -> BaseLab:
    """The lab for the inventory's backend."""
    if inv.backend == "ssh":
        from testbed.ssh_lab import SshLab

        return SshLab(inv)
    return NetnsLab(inv)


class BaseLab(ABC):
    inv: Inventory
    hosts: dict[str, Host]
    bridge: str
    up_if: str  # appliance port facing the server: client->server traffic leaves here
    down_if: str  # appliance port facing the client: server->client traffic leaves here

    # ---------------------------------------------------------------- what a backend supplies
    @abstractmethod
    def is_up(self) -> bool: ...

    @abstractmethod
    def preflight(self) -> list[str]:
        """Every problem that would stop `up`, all at once, before anything is changed."""

    @abstractmethod
    def _up(self) -> None:
        """Hosts, bridge, CPU limit; shaping and services follow in `up`."""

    @abstractmethod
    def down(self) -> list[str]: ...

    @abstractmethod
    def _apply_shaping(self, link: LinkSpec, plan: list[PortShaping]) -> None: ...

    @abstractmethod
    def read_shaping(self) -> dict[str, dict]: ...

    @abstractmethod
    def clear_shaping(self) -> None:
        """No qdisc of ours on the appliance's ports (a later `shape` puts HTB back)."""

    @abstractmethod
    def apply_cpu_limit(self) -> None: ...

    @abstractmethod
    def cpu_in_force(self) -> dict: ...

    @abstractmethod
    def bridge_status(self) -> dict: ...

    # ---------------------------------------------------------------- queries
    def host(self, role: str) -> Host:
        return self.hosts[role]

    def find_host(self, name: str) -> Host:
        for host in self.hosts.values():
            if name in (host.name, host.role):
                return host
        known = ", ".join(f"{h.role} ({h.name})" for h in self.hosts.values())
        raise UserError(f"unknown host {name!r}", f"use one of: {known}")

    def require_up(self) -> None:
        if not self.is_up():
            raise UserError("the testbed is not up", "run `testbed up` first")

    @property
    def server_url(self) -> str:
        return f"http://{self.inv.host('server').address.ip}:{self.inv.server_port}"

    # ---------------------------------------------------------------- up
    def up(self, start_server: bool = True) -> bool:
        """Bring the testbed up; returns False when it already was (up is idempotent)."""
        if self.is_up():
            return False
        problems = self.preflight()
        if problems:
            raise UserError("cannot bring the testbed up: " + "; ".join(problems))
        try:
            self._up()
            self.shape(self.inv.link)
            self.start_services(start_server)
            self._mark_up()
        except BaseException:
            self.down()
            raise
        return True

    @abstractmethod
    def _mark_up(self) -> None:
        """Record that the testbed is complete (what `is_up` looks for)."""

    # ---------------------------------------------------------------- services
    def start_services(self, start_server: bool = True) -> None:
        server = self.host("server")
        addr = str(self.inv.host("server").address.ip)
        server.start("iperf3", ["iperf3", "-s", "-B", addr, "-p", str(self.inv.iperf3_port)])
        if start_server:
            self.start_offload_server()

    def start_offload_server(self) -> None:
        server = self.host("server")
        addr = str(self.inv.host("server").address.ip)
        server.start("offload", server.python("server", "--bind", addr, "--port", str(self.inv.server_port)))
        self.wait_for_server()

    def wait_for_server(self, timeout: float = 60.0) -> dict:
        """Ask from the client host, so the answer also proves the path through the switch."""
        client = self.host("client")
        result = client.run(
            client.python("client", "health", "--url", self.server_url, "--wait", str(timeout)),
            limited=False,
            check=False,
            timeout=timeout + 30,
        )
        if not result.ok:
            raise UserError(
                f"the offload server at {self.server_url} did not answer from the client: "
                f"{(result.stderr or result.stdout).strip()[-300:]}",
                f"see the server's log on {self.host('server').name}",
            )
        return json.loads(result.stdout or "{}")

    def server_alive(self) -> bool:
        return self.host("server").service_pid("offload") is not None

    # ---------------------------------------------------------------- shaping
    def shaping_plan(self, link: LinkSpec) -> list[PortShaping]:
        return plan_shaping(link, up_if=self.up_if, down_if=self.down_if)

    def shape(self, link: LinkSpec, dry_run: bool = False) -> list[PortShaping]:
        plan = self.shaping_plan(link)
        if not dry_run:
            self._apply_shaping(link, plan)
        return plan

    def set_rate(self, rate_bps: int) -> None:
        """The sweep's in-place rate change between cells: both directions, nothing else altered."""
        self.shape(replace(self.inv.link, up_rate=rate_bps, down_rate=rate_bps, ceil=None, burst=None))

    def link_in_force(self) -> LinkSpec:
        """The inventory's link with the rates the kernel has now (what a temporary change restores)."""
        shaping = self.read_shaping()
        up = (shaping.get(self.up_if) or {}).get("htb")
        down = (shaping.get(self.down_if) or {}).get("htb")
        link = self.inv.link
        if up and down:
            link = replace(
                link,
                up_rate=up["rate"],
                down_rate=down["rate"],
                ceil=max(up["ceil"], down["ceil"]) if link.ceil else None,
            )
        return link

    # ---------------------------------------------------------------- status
    def status(self) -> dict:
        up = self.is_up()
        hosts = {
            role: {
                "name": host.name,
                "where": host.where,
                "address": str(self.inv.host(role).address) if self.inv.host(role).address else None,
            }
            for role, host in self.hosts.items()
        }
        status = {
            "up": up,
            "backend": self.inv.backend,
            "inventory": str(self.inv.path),
            "hosts": hosts,
            "client_cpu": {"profile": asdict(self.inv.client_cpu), "in_force": self.cpu_in_force()},
        }
        if not up:
            return status
        status["bridge"] = self.bridge_status()
        shaping = self.read_shaping()
        status["shaping"] = {
            "up (client->server)": {"port": self.up_if, **(shaping.get(self.up_if) or {})},
            "down (server->client)": {"port": self.down_if, **(shaping.get(self.down_if) or {})},
        }
        status["services"] = {
            svc: bool(self.host("server").service_pid(svc)) for svc in ("iperf3", "offload")
        }
        status["server_url"] = self.server_url
        return status


class NetnsLab(BaseLab):
    """The embedded testbed: three network namespaces on this machine."""

    def __init__(self, inv: Inventory) -> None:
        self.inv = inv
        self.names = Names.of(inv)
        self.bridge, self.up_if, self.down_if = self.names.bridge, self.names.to_server, self.names.to_client
        self.state_dir = STATE_ROOT / inv.prefix
        self.switch = Switch(self.bridge, (self.down_if, self.up_if), self.state_dir / "ovs")
        self.shaper = Shaper(self.names.appliance_ns)
        quota = inv.client_cpu.cpu_quota
        self.cpu_limit = CpuLimit(self.names.cgroup, quota) if quota else None
        specs = inv.hosts
        self.hosts = {
            "client": NetnsHost(
                specs["client"],
                self.names.client_ns,
                self.state_dir,
                self.cpu_limit,
                env=blas_env(inv.client_cpu.blas_threads, inv.client_cpu.blas_core),
            ),
            "appliance": NetnsHost(specs["appliance"], self.names.appliance_ns, self.state_dir),
            "server": NetnsHost(specs["server"], self.names.server_ns, self.state_dir),
        }

    def is_up(self) -> bool:
        return len(topology.existing_namespaces(self.names)) == 3 and (self.state_dir / "up.json").exists()

    def preflight(self) -> list[str]:
        problems = []
        if os.geteuid() != 0:
            problems.append("not running as root (run with sudo)")
        missing = [p for p in REQUIRED_PROGRAMS if shutil.which(p) is None]
        if missing:
            problems.append(f"programs missing: {', '.join(missing)} (run scripts/setup.sh)")
        if shutil.which("ovsdb-tool") and not SCHEMA.exists():
            problems.append(f"Open vSwitch schema {SCHEMA} missing (reinstall openvswitch-common)")
        if not Path("/dev/net/tun").exists():
            problems.append("/dev/net/tun missing: the userspace OVS bridge needs the tun device")
        if self.inv.client_cpu.cpu_quota:
            try:
                detect_version()
            except UserError as exc:
                problems.append(exc.message)
        present = topology.existing_namespaces(self.names)
        if present:
            problems.append(
                f"leftovers of an earlier testbed: {', '.join(present)} (run `testbed down` first)"
            )
        return problems

    def _up(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        topology.apply(topology.plan(self.inv))
        # veth TX checksum offload must be off, or the userspace datapath forwards packets whose
        # checksums were never filled in, and TCP stalls
        for role, ifnames in (
            ("client", [self.names.client_if]),
            ("server", [self.names.server_if]),
            ("appliance", [self.down_if, self.up_if]),
        ):
            for ifname in ifnames:
                self.host(role).run(["ethtool", "-K", ifname, "tx", "off"], limited=False)
        self.switch.rundir.mkdir(parents=True, exist_ok=True)
        appliance = self.host("appliance")
        for argv in self.switch.plan_up():
            appliance.run(argv, env=self.switch.env(), timeout=30)
        self.apply_cpu_limit()

    def _mark_up(self) -> None:
        (self.state_dir / "up.json").write_text(
            json.dumps(
                {
                    "inventory": str(self.inv.path),
                    "prefix": self.inv.prefix,
                    "namespaces": list(self.names.namespaces),
                    "started_at": time.time(),
                    "pid": os.getpid(),
                },
                indent=2,
            )
        )

    def down(self) -> list[str]:
        """Remove everything of this testbed; idempotent, and works from any half-built state."""
        removed = []
        present = topology.existing_namespaces(self.names)
        for ns in present:
            _kill_netns_processes(ns)
        for ns in present:
            run(["ip", "netns", "delete", ns], check=False)
            removed.append(f"netns {ns}")
        removed += [f"link {name}" for name in topology.remove_root_leftovers(self.names)]
        limit = self.cpu_limit or _any_cgroup(self.names.cgroup)
        if limit and limit.exists():
            limit.remove()
            removed.append(f"cgroup {limit.path}")
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir, ignore_errors=True)
            removed.append(f"state {self.state_dir}")
        return removed

    def _apply_shaping(self, link: LinkSpec, plan: list[PortShaping]) -> None:
        self.shaper.apply(plan)

    def read_shaping(self) -> dict[str, dict]:
        return self.shaper.read([self.up_if, self.down_if])

    def clear_shaping(self) -> None:
        self.shaper.clear([self.up_if, self.down_if])

    def apply_cpu_limit(self) -> None:
        if self.cpu_limit:
            self.cpu_limit.apply()

    def cpu_in_force(self) -> dict:
        limit = self.cpu_limit or _any_cgroup(self.names.cgroup)
        return limit.read() if limit else {}

    def bridge_status(self) -> dict:
        appliance = self.host("appliance")
        ports = appliance.run(self.switch.vsctl("list-ports", self.bridge), check=False)
        dp = appliance.run(self.switch.vsctl("get", "bridge", self.bridge, "datapath_type"), check=False)
        return {
            "name": self.bridge,
            "datapath_type": dp.stdout.strip().strip('"') or None,
            "ports": ports.stdout.split(),
        }


Lab = NetnsLab


def _any_cgroup(name: str) -> CpuLimit | None:
    """The client's cgroup, if one exists, also when the inventory no longer asks for a limit."""
    try:
        limit = CpuLimit(name, 1.0)
    except UserError:
        return None
    return limit if limit.exists() else None


def _kill_netns_processes(ns: str) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [int(p) for p in run(["ip", "netns", "pids", ns], check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if not run(["ip", "netns", "pids", ns], check=False).stdout.split():
                return
            time.sleep(0.1)
