"""The testbed's life cycle: check, up, shape, status, down.

`Lab` holds everything both backends share, and acts on hosts only through the host agent
(`python -m agent --serve`, resident for the command; `close` ends it): shaping, the client's CPU
limit, services, the bridge, probes and counters are the same calls whether the host is a namespace
here (`testbed.backends.netns.NetnsLab`) or a machine over SSH (`testbed.backends.ssh.SshLab`). A backend supplies only how
hosts are reached and wired (veth pairs in namespaces, or existing NICs) and what `down` must undo.
`NetnsLab.down` (testbed.backends.netns) derives every name from the inventory, so it cleans up after a crash even when no
state file survived.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from dataclasses import replace
from pathlib import Path

from contracts import agent_answers as answers
from contracts import agent_api as api
from contracts.device import DeviceProfile
from contracts.errors import UserError
from contracts.hosts import Role
from contracts.message import encode
from contracts.profiles import LinkSpec
from contracts.stages import (
    GRPC_SERVERS,
    PYTHON,
    TAGLESS_SERVERS,
)
from contracts.trace import ReplayPlan
from testbed.backends.host import Host
from testbed.backends.life_cycle import LabUse
from testbed.backends.offload_servers import OffloadServers
from testbed.inventory import Inventory

STATE_ROOT = Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed"))
OVS_PROGRAMS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-appctl")
PROGRAMS = {  # what each role's host must have
    "client": ("ip", "ethtool"),
    "server": ("ip", "ethtool", "iperf3"),
    "appliance": ("ip", "ethtool", *OVS_PROGRAMS),
}
STACK_PROGRAMS = {"wsgi": (), "cgi": ("lighttpd",)}  # what the server's host needs for each stack


def require_root() -> None:
    if os.geteuid() != 0:
        raise UserError(
            "testbed must run as root: it creates network namespaces, qdiscs and cgroups", "run it as root"
        )


def probe_problems(role: str, probe: answers.ProbeReport, needs_cgroup: bool) -> list[str]:
    """What a host's probe (the agent's `probe` verb) says would stop `up`, in words with the fix."""
    problems = []
    if not probe.root:
        problems.append(
            "commands do not run as root (run testbed as root; over SSH, log in as root or give the user password-less sudo)"
        )
    missing = [p for p, path in probe.programs.items() if not path]
    if missing:
        problems.append(f"programs missing: {', '.join(missing)} (run scripts/setup.sh)")
    absent = [i for i, present in probe.interfaces.items() if not present]
    if absent:
        problems.append(f"no interface {', '.join(absent)}")
    modules = [m for m, ok in probe.python_modules.items() if not ok]
    if modules:
        problems.append(
            f"Python modules missing: {', '.join(modules)} (pip install the project's dependencies)"
        )
    if needs_cgroup and probe.cgroup is None:
        problems.append(probe.cgroup_error or "no cgroup cpu controller")
    if role == Role.APPLIANCE:
        if not probe.ovs_kernel_module and not probe.tun:
            problems.append("/dev/net/tun missing: the userspace OVS bridge needs the tun device")
        if not probe.ovs_schema:
            problems.append("the Open vSwitch schema is missing (reinstall openvswitch-common)")
    return problems


class Lab(OffloadServers, ABC):
    inv: Inventory
    hosts: dict[str, Host]
    bridge: str
    up_if: str  # appliance port facing the server: client->server traffic leaves here
    down_if: str  # appliance port facing the client: server->client traffic leaves here
    cgroup: str  # the client's CPU limit
    probes: dict[str, answers.ProbeReport]  # the hosts' answers to `probe`, by role, from the last preflight
    replica: int | None = None  # which of a sweep's testbeds this is (None: the sweep has one)
    # how the offload server runs requests (contracts.stages.SERVER_STACKS): what `up` and a restart
    # start; a sweep sets its experiment's, `testbed up --server-stack` the one asked for
    server_stack: str = "wsgi"
    # the gRPC servers it starts (contracts.stages.GRPC_SERVERS), each on grpc_port plus its index: a
    # sweep sets its experiment's `servers`, `testbed up --servers` the ones asked for
    grpc_servers: tuple[str, ...] = (PYTHON,)
    # the server's work slots (requests working at once; the rest queue) and the device its stages last the
    # time of (`python -m server --work-slots --pace`): `testbed up --server-workers --pace-server`
    work_slots: int = 1
    pace: DeviceProfile | None = None
    parts: int = 1  # the most connections a client opens at once (parallelism x concurrency)
    datasets: str | None = None  # the server host's directory of datasets it serves (transfer sweeps)
    # whether the client hosts are one machine (the embedded testbed's namespaces): a device is then
    # calibrated once for all its clients; an SSH lab's client machines each calibrate their own
    clients_share_a_machine: bool = True
    # the delay and loss of a sweep's group of trials (its `LinkPoint`; None: the inventory's)
    delay_ms: float | None = None
    loss_pct: float | None = None
    # the HTB burst a sweep shapes with (bytes; None: derived from the rate, `default_burst`): an RPC
    # study's `SMALL_BURST`, so that no message of a call passes within it at line rate
    burst: int | None = None
    serialize: bool = False  # ... and each packet held for its bytes at the rate (netem, where there)

    # ---------------------------------------------------------------- what a backend supplies
    @abstractmethod
    def is_up(self) -> bool: ...

    @abstractmethod
    def preflight(self) -> list[str]:
        """Every problem that would stop `up`, all at once, before anything is changed."""

    @abstractmethod
    def _up(self) -> None:
        """Hosts, wiring, bridge, CPU limit; shaping and services follow in `up`."""

    @abstractmethod
    def _mark_up(self) -> None:
        """Record that the testbed is complete (what `is_up` looks for)."""

    @abstractmethod
    def down(self) -> list[str]: ...

    @abstractmethod
    def switch_args(self) -> dict:
        """The bridge as the agent's bridge verbs take it (`contracts.agent_api.SwitchRef`): bridge,
        rundir, own."""

    @abstractmethod
    def datapath(self) -> str:
        """The bridge's datapath as `up` chose it: netdev (userspace) or system (the kernel module)."""

    # ---------------------------------------------------------------- the hosts' agents
    def bridge_layout(self) -> dict[str, list[str]]:
        """Each bridge of the appliance with its ports, `bridge` first (one unless several clients)."""
        return {self.bridge: [self.down_if, self.up_if]}

    def _bridges(self) -> dict:
        """The layout as the agent's bridge verbs take it (`contracts.agent_api.Layout`): `ports` of
        `bridge`, and `more` bridges."""
        (_, ports), *more = self.bridge_layout().items()
        return {"ports": tuple(ports), "more": tuple((b, tuple(p)) for b, p in more)}

    @property
    def client_roles(self) -> tuple[str, ...]:
        """Every client host's role: `client`, and with several clients `client2` ..."""
        return self.inv.client_roles

    def close(self) -> None:
        """End every host's agent (and connection): the command is done with the lab."""
        for host in self.hosts.values():
            host.close()

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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

    def probe(self, role: str, interfaces: list[str] = ()) -> list[str]:
        """The problems the host of `role` reports about itself (see `probe_problems`)."""
        client = role in self.client_roles
        needs_cgroup = client and bool(self.inv.client_cpu.cpu_quota)
        programs = [
            *PROGRAMS["client" if client else role],
            *(STACK_PROGRAMS[self.server_stack] if role == Role.SERVER else ()),
        ]
        probe = self.host(role).agent(
            api.Probe(programs=tuple(programs), interfaces=tuple(interfaces), cgroup=needs_cgroup)
        )
        self.probes[role] = probe  # what `_up` needs to know of the host (its Open vSwitch, say)
        return probe_problems(role, probe, needs_cgroup)

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
        except BaseException as failure:
            try:
                self.down()
            except Exception as cleanup:  # the failure that stopped `up` is the one to report
                failure.add_note(f"taking the testbed down again also failed: {cleanup!r}")
            raise
        return True

    def use(self, keep_up: bool = False, start_server: bool = True) -> LabUse:
        """One use of this testbed, left as it was found (`testbed.backends.life_cycle`): `with
        lab.use() as use:`, or `open()` and `close()` where the end is a phase of its own."""
        return LabUse(self, keep_up, start_server)

    # ---------------------------------------------------------------- services
    def start_services(self, start_server: bool = True) -> None:
        self.start_iperf3()
        if start_server:
            self.start_offload_server()

    def start_iperf3(self) -> None:
        """The server's iperf3 server, which validation measures the link against."""
        addr = str(self.inv.host("server").address.ip)
        self.host("server").start("iperf3", ["iperf3", "-s", "-B", addr, "-p", str(self.inv.iperf3_port)])

    def iperf3_alive(self) -> bool:
        return self.host("server").service_pid("iperf3") is not None

    # ---------------------------------------------------------------- shaping (the appliance's agent)
    def _ports(self) -> dict:
        return {"up_if": self.up_if, "down_if": self.down_if}

    def _ifs(self) -> tuple[str, str]:
        return (self.up_if, self.down_if)

    def shape(self, link: LinkSpec, dry_run: bool = False) -> list[answers.PortPlan]:
        """Shape both directions; the plan (per port, with its `commands`) is the appliance's own."""
        request = api.ShapePlan if dry_run else api.ShapeApply
        return self.host("appliance").agent(request(link=link, **self._ports()))

    def set_rate(self, rate_bps: int) -> None:
        """The sweep's in-place rate change between cells: both directions, nothing else altered."""
        self.shape(self.link_at(rate_bps))

    def netem_available(self) -> bool:
        """Whether the appliance's kernel has netem (delay, loss, serialization)."""
        return self.host("appliance").agent(api.ShapeNetem())

    def link_at(self, rate_bps: int) -> LinkSpec:
        """What `set_rate` shapes: the inventory's link at this rate, with the sweep's delay and loss."""
        link = self.inv.link.at_rate(rate_bps, self.delay_ms, self.loss_pct)
        link = link if self.burst is None else replace(link, burst=self.burst)
        return replace(link, serialize=self.serialize) if self.serialize else link

    def replay_plan(self, plan: ReplayPlan) -> list[answers.ReplayStepPlan]:
        """The appliance's timed operations for a trace, from its ports' state now (the dry run)."""
        return self.host("appliance").agent(
            api.ShapeReplayPlan(plan=plan, link=self.inv.link, **self._ports())
        )

    def replay_trace(self, plan: ReplayPlan, start: float) -> answers.ReplayDone:
        """One pass of a trace from `start` (wall-clock seconds), in place on both ports; returns
        when it has been played, with the times each step was applied and the counters at each."""
        return self.host("appliance").agent(
            api.ShapeReplay(plan=plan, link=self.inv.link, start=start, **self._ports()),
            timeout=max(0.0, start - time.time()) + plan.end_s + 60,
        )

    def shaping_classes(self) -> dict[str, answers.HtbClass]:
        """The appliance's HTB class per port now: rate, ceil (bits/s) and counters (bytes sent...)."""
        return self.host("appliance").agent(api.ShapeClasses(ifs=self._ifs()))

    def read_shaping(self) -> dict[str, answers.ShapingInForce]:
        return self.host("appliance").agent(api.ShapeRead(ifs=self._ifs()))

    def clear_shaping(self) -> None:
        """No qdisc of ours on the appliance's ports (a later `shape` puts HTB back)."""
        self.host("appliance").agent(api.ShapeClear(ifs=self._ifs()))

    def link_in_force(self) -> LinkSpec:
        """The inventory's link with the rates the kernel has now (what a temporary change restores)."""
        shaping = self.read_shaping()
        up = shaping.get(self.up_if, answers.ShapingInForce()).htb
        down = shaping.get(self.down_if, answers.ShapingInForce()).htb
        link = self.inv.link
        if up and down:
            link = replace(
                link,
                up_rate=up.rate,
                down_rate=down.rate,
                ceil=max(up.ceil, down.ceil) if link.ceil else None,
            )
        return link

    def counters(self) -> answers.CounterSnapshot:
        """The appliance's counters now: HTB per port (exact) and OVS per interface (refreshed every 5 s)."""
        return self.host("appliance").agent(api.ApplianceCounters(ifs=self._ifs(), **self.switch_args()))

    # ---------------------------------------------------------------- client CPU limit (the client's agent)
    def client_cgroups(self) -> dict[str, str]:
        """Each client host's role and the cgroup of its CPU limit."""
        return {"client": self.cgroup}

    def apply_cpu_limit(self) -> None:
        """The client profile's CPU quota on every client host (each its own cgroup: one device each)."""
        quota = self.inv.client_cpu.cpu_quota
        if quota:
            for role, cgroup in self.client_cgroups().items():
                self.host(role).agent(api.CpuApply(name=cgroup, quota=quota))

    def set_client_quota(self, fraction: float) -> answers.CpuLimitReading:
        """A new CPU quota for the client (throttled device emulation); the limit now in force."""
        self.inv = self.inv.with_client_cpu(replace(self.inv.client_cpu, cpu_quota=fraction))
        self.apply_cpu_limit()
        return self.cpu_in_force()

    def cpu_in_force(self) -> answers.CpuLimitReading:
        try:
            return self.host("client").agent(api.CpuRead(name=self.cgroup))
        except UserError:
            return answers.CpuLimitReading()

    # ---------------------------------------------------------------- the switch's health (the appliance's agent)
    def appliance_check(self) -> answers.ApplianceReading:
        """What the sweep reads after every shaped trial, in one request: `classes` (as
        `shaping_classes`) and `switch`, what is wrong with the switch's daemons (empty: they run)."""
        return self.host("appliance").agent(api.ApplianceCheck(ifs=self._ifs(), **self.switch_args()))

    def switch_problems(self) -> list[str]:
        """What is wrong with the switch (empty: healthy): its daemons, the bridge and its ports."""
        return self.host("appliance").agent(api.BridgeHealth(**self._bridges(), **self.switch_args()))

    def restart_switch(self) -> answers.BridgeSnapshot | None:
        """Open vSwitch and the bridge afresh, as `up` built them; the shaping must follow (`shape`)."""
        return self.host("appliance").agent(
            api.BridgeRestart(**self._bridges(), datapath=self.datapath(), **self.switch_args())
        )

    # ---------------------------------------------------------------- status
    def bridge_status(self, bridge: str | None = None) -> answers.BridgeSnapshot | None:
        """The bridge `bridge` (default: the testbed's) as OVSDB has it; None where there is none."""
        return self.host("appliance").agent(
            api.BridgeStatus(**{**self.switch_args(), "bridge": bridge or self.bridge})
        )

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
            "client_cpu": {
                "profile": self.inv.client_cpu.as_dict(),
                "in_force": self.cpu_in_force().to_json(),
            },
        }
        if not up:
            return status
        status["bridge"] = encode(self.bridge_status()) or {
            "name": self.bridge,
            "datapath_type": None,
            "ports": [],
        }
        more = list(self.bridge_layout())[1:]
        if more:  # several clients: the server's bridge, joined to the clients' by the trunk
            status["bridges"] = [encode(self.bridge_status(b)) for b in more]
        shaping = encode(self.read_shaping())
        status["shaping"] = {
            "up (client->server)": {"port": self.up_if, **shaping.get(self.up_if, {})},
            "down (server->client)": {"port": self.down_if, **shaping.get(self.down_if, {})},
        }
        status["services"] = {
            svc: bool(self.host("server").service_pid(svc)) for svc in ("iperf3", "offload")
        }
        running = status["services"]["offload"]
        # every language's port: one the server was not started with answers nothing
        status["grpc_servers"] = {
            s: {"target": self.grpc_target_of(s), "answers": running and self.grpc_answers(0.5, s)}
            for s in GRPC_SERVERS
        }
        status["services"]["grpc"] = status["grpc_servers"][PYTHON]["answers"]
        status["tagless_servers"] = {
            s: {"target": self.tagless_target_of(s), "answers": running and self.tagless_answers(0.5, s)}
            for s in TAGLESS_SERVERS
        }
        status["server_stack"] = self.running_stack() if running else None
        status["server_url"] = self.server_url
        status["grpc_target"] = self.grpc_target
        return status
