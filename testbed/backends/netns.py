"""The embedded backend: the testbed's three (or more) hosts are network namespaces on this machine.

`NetnsHost` enters a namespace to run a command or its resident agent; `NetnsLab` wires the
namespaces (veth pairs, an Open vSwitch of its own) and undoes all of it in `down`, whose names
follow from the inventory alone, so it cleans up after a crash even when no state file survived.

**The switch's datapath** is chosen at `up`: the kernel's (`system`) where the openvswitch module is
loaded or loads, userspace (`netdev`) otherwise (this machine's own kernel has no such module; a stock
Debian kernel has, and `testbed guest` runs one). The userspace datapath forwards every packet through
ovs-vswitchd, which cost 0.5 s per request at 40-100 Mbit/s with four testbeds on the 2-core VM
(issue 45's paper grid); the kernel's forwards in the kernel. Each testbed's ovs-vswitchd runs in
its appliance namespace with a database of its own, and the kernel keeps datapaths per network
namespace, so several testbeds each have their own `ovs-system` and never see each other's ports.
`up.json` records the choice (`status` reads it from the switch, the sweep's manifest from here); a
module this machine did not have loaded before is unloaded by the `down` that leaves no testbed
using it (`OVS_MODULE_MARK`).
Everything else a lab does is `testbed.backends.lab.Lab`'s, the same for SSH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from contracts import agent_api as api
from contracts.command import Result, run
from contracts.cpu_lock import ENV as CPU_LOCK_ENV
from contracts.errors import UserError
from contracts.processes import daemon_pids, stop_all, watch
from contracts.profiles import blas_env
from testbed.backends import topology
from testbed.backends.agent_link import AgentLink, local_spawn
from testbed.backends.host import Host, project_path
from testbed.backends.lab import STATE_ROOT, Lab
from testbed.backends.replicas import remove_cpu_lock
from testbed.backends.topology import Names
from testbed.inventory import MAX_CLIENTS, HostSpec, Inventory

OVS_MODULE = "openvswitch"  # the kernel datapath's module
# present while a module some `up` loaded may still be in use: the `down` that unloads it removes it
OVS_MODULE_MARK = STATE_ROOT / "openvswitch-loaded-by-testbed"


class NetnsHost(Host):
    """A host that is a network namespace on this machine."""

    def __init__(
        self,
        spec: HostSpec,
        netns: str,
        state_dir: Path,
        cgroup: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self.netns = netns
        self.state_dir = state_dir
        self.cgroup = cgroup
        self.env = {"PATH": project_path(), **(env or {})}
        self._here: AgentLink | None = None
        self._inside: AgentLink | None = None
        self._inside_ns: tuple[int, int] | None = None  # which namespace of that name it is in

    @property
    def where(self) -> str:
        return f"netns {self.netns}"

    def python(self, module: str, *args: str) -> list[str]:
        return [sys.executable, "-m", module, *args]

    def _netns(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def limited(self, argv: Sequence[str], limited: bool | None = None) -> list[str]:
        """Join the cgroup here, then enter the namespace: `ip netns exec` mounts a /sys of the
        namespace's own, without the cgroup file system, so nothing inside could join it."""
        argv = [str(a) for a in argv]
        if self.cgroup and limited is not False:
            return [*self.python("client.cpulimit", "--name", self.cgroup, "--"), *self._netns(argv)]
        return self._netns(argv)

    def _exec(self, argv, *, timeout, env, input) -> Result:
        return run(argv, host=self.name, check=False, timeout=timeout, env=env, input=input)

    def write(self, data: bytes, dst: str) -> None:
        """A file of the host's (namespaces share this machine's file system)."""
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        Path(dst).write_bytes(data)

    def _popen(self, argv, env, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(argv, env={**os.environ, **env}, **kwargs)

    def _agent_exec(self, verb: str, payload: str, timeout: float) -> Result:
        """In the namespace when it exists and the verb needs its network; otherwise here.

        Only the network differs between this machine and its namespaces: a plan, a probe taken
        before `up` or after `down`, and the cgroup (whose file system `ip netns exec` hides) are the
        host's own here. A verb that needs the network of a namespace that is not there fails as it
        should (no such port). So there are two resident agents, each started on its first verb; the
        one inside is replaced when the namespace of that name is another (removed, made again).
        """
        namespace = self._namespace_id() if not verb.startswith("cpu.") else None
        if namespace is None:
            if self._here is None:
                self._here = self._link(self.python("agent", "--serve"))
            return self._here.ask(verb, payload, timeout)
        if self._inside is not None and self._inside_ns != namespace:
            self._inside.close()
            self._inside = None
        if self._inside is None:
            self._inside = self._link(self._netns(self.python("agent", "--serve")))
            self._inside_ns = namespace
        return self._inside.ask(verb, payload, timeout)

    def _namespace_id(self) -> tuple[int, int] | None:
        """The namespace's identity (its nsfs inode), or None where it is not there to enter."""
        if os.geteuid() != 0:
            return None
        try:
            st = os.stat(f"/run/netns/{self.netns}")
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _link(self, argv: list[str]) -> AgentLink:
        return AgentLink(self.name, argv, local_spawn(argv))

    @property
    def agents(self) -> list[AgentLink]:
        """The host's agent links (here, in the namespace) that were started."""
        return [link for link in (self._here, self._inside) if link is not None]

    def close(self) -> None:
        for link in self.agents:
            link.close()
        self._here = self._inside = None


class NetnsLab(Lab):
    """The embedded testbed: three network namespaces on this machine."""

    def __init__(self, inv: Inventory, state_dir: Path | None = None) -> None:
        """`state_dir`: where its state lives (default STATE_ROOT/PREFIX)."""
        self.state_dir = state_dir or STATE_ROOT / inv.prefix
        self.asked_clients = inv.clients
        running = self.running_clients()
        if running is not None and running != inv.clients:  # every command acts on what is up
            inv = inv.with_clients(running)
        self.inv = inv
        self.names = Names.of(inv)
        self.bridge, self.up_if, self.down_if = self.names.bridge, self.names.to_server, self.names.down_port
        self.cgroup = self.names.cgroup
        self.probes = {}
        self._datapath: str | None = None  # what `up` chose, else what its up.json says
        quota = inv.client_cpu.cpu_quota
        specs = inv.hosts
        lock = {CPU_LOCK_ENV: inv.cpu_lock} if inv.cpu_lock else {}  # replicas: one timed stage at a time
        client_env = {**blas_env(inv.client_cpu.blas_threads, inv.client_cpu.blas_core), **lock}
        self.hosts = {
            **{
                c.role: NetnsHost(
                    inv.host(c.role), c.ns, self.state_dir, c.cgroup if quota else None, env=client_env
                )
                for c in self.names.clients
            },
            "appliance": NetnsHost(specs["appliance"], self.names.appliance_ns, self.state_dir),
            "server": NetnsHost(
                specs["server"],
                self.names.server_ns,
                self.state_dir,
                env={**inv.server_env(), **lock} or None,
            ),
        }

    def switch_args(self) -> dict:
        return {"bridge": self.bridge, "rundir": str(self.state_dir / "ovs"), "own": True}

    def bridge_layout(self) -> dict[str, list[str]]:
        return self.names.bridges

    def client_cgroups(self) -> dict[str, str]:
        return {c.role: c.cgroup for c in self.names.clients}

    def datapath(self) -> str:
        """What `up` chose (its `up.json`): `system` where the openvswitch module was there to load,
        `netdev` otherwise, and for a testbed brought up before the choice was recorded."""
        if self._datapath is None:
            self._datapath = str(self._up_record().get("datapath", "netdev"))
        return self._datapath

    def choose_datapath(self) -> str:
        """`system` when the openvswitch module is loaded or loads now, else `netdev`. A load is
        marked (`OVS_MODULE_MARK`) for `down` to undo."""
        probe = self.probes.get("appliance")
        if probe is not None and probe.ovs_kernel_module:
            return "system"
        loaded = run(["modprobe", "-q", OVS_MODULE], check=False)
        if loaded.returncode != 0:
            return "netdev"
        OVS_MODULE_MARK.parent.mkdir(parents=True, exist_ok=True)
        OVS_MODULE_MARK.touch()
        return "system"

    def _up_record(self) -> dict:
        """The testbed's `up.json`, or nothing when none is up."""
        try:
            record = json.loads((self.state_dir / "up.json").read_text())
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def is_up(self) -> bool:
        present = topology.existing_namespaces(self.names)
        return len(present) == len(self.names.namespaces) and (self.state_dir / "up.json").exists()

    def running_clients(self) -> int | None:
        """How many client hosts the testbed that is up has (its `up.json`); None when none is up."""
        record = self._up_record()
        try:
            return int(record.get("clients", 1)) if record else None
        except (TypeError, ValueError):
            return None

    def up(self, start_server: bool = True) -> bool:
        if self.is_up() and self.asked_clients not in (1, self.inv.clients):
            raise UserError(
                f"the testbed is up with {self.inv.clients} client(s), not {self.asked_clients}",
                "run `testbed down` first",
            )
        return super().up(start_server)

    def preflight(self) -> list[str]:
        if os.geteuid() != 0:
            return ["not running as root (run testbed as root)"]
        problems = []
        for role in ("client", "appliance", "server"):  # the namespaces do not exist yet: this machine
            problems += [p for p in self.probe(role) if p not in problems]
        present = topology.existing_namespaces(self.everything())
        if present:
            problems.append(
                f"leftovers of an earlier testbed: {', '.join(present)} (run `testbed down` first)"
            )
        return problems

    def _up(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        topology.apply(topology.plan(self.inv))
        self._datapath = self.choose_datapath()
        # veth TX checksum offload must be off, or the userspace datapath forwards packets whose
        # checksums were never filled in, and TCP stalls
        n = self.names
        roles = {**{c.ns: c.role for c in n.clients}, n.appliance_ns: "appliance", n.server_ns: "server"}
        for ns, ifname in topology.ports(n) if self._datapath == "netdev" else []:
            self.host(roles[ns]).run(["ethtool", "-K", ifname, "tx", "off"], limited=False)
        self.host("appliance").agent(
            api.BridgeUp(**self._bridges(), datapath=self.datapath(), **self.switch_args())
        )
        self.apply_cpu_limit()

    def _mark_up(self) -> None:
        (self.state_dir / "up.json").write_text(
            json.dumps(
                {
                    "inventory": str(self.inv.path),
                    "prefix": self.inv.prefix,
                    "namespaces": list(self.names.namespaces),
                    "clients": self.inv.clients,
                    "datapath": self.datapath(),
                    "started_at": time.time(),
                    "pid": os.getpid(),
                },
                indent=2,
            )
        )

    def down(self) -> list[str]:
        """Remove everything of this testbed; idempotent, and works from any half-built state."""
        removed = []
        self.close()  # the agents in the namespaces go first, of their own accord
        everything = self.everything()
        present = topology.existing_namespaces(everything)
        # every process in the namespaces, and the OVS daemons by their pid files: a daemon already
        # exiting has left its namespace's list, and is waited for all the same
        daemons = {pid: watch(pid) for pid in self.ovs_daemons()}

        def ours(ns: str | None) -> list[int]:
            return (_netns_pids(ns) if ns else []) + [pid for pid, running in daemons.items() if running()]

        stuck = []
        for ns in present or [None]:
            if not stop_all(lambda ns=ns: ours(ns), grace=3.0, poll=0.1):
                stuck += ours(ns) or ["?"]
        for ns in present:
            run(["ip", "netns", "delete", ns], check=False)
            removed.append(f"netns {ns}")
        removed += [f"link {name}" for name in topology.remove_root_leftovers(everything)]
        # also when the inventory no longer asks for a limit; the namespace is gone, so the agent
        # runs here, where the cgroup is
        for client in everything.clients:
            if self.host("client").agent(api.CpuRemove(name=client.cgroup)):
                removed.append(f"cgroup {client.cgroup}")
        if stuck:  # the state stays: its pid files name the daemons for the next `down`
            raise UserError(
                f"processes of the testbed outlived SIGKILL: pids {', '.join(map(str, stuck))} "
                f"(removed: {', '.join(removed) or 'nothing'})",
                "a process stuck in the kernel: see `ps -o pid,stat,wchan -p PIDS`, then run testbed down again",
            )
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir, ignore_errors=True)
            removed.append(f"state {self.state_dir}")
        self._datapath = None  # the next `up` chooses again
        removed += unload_ovs_module()
        # the down that leaves no testbed on this machine: `testbed down` of the last replica, and a
        # sweep's end that takes down the replicas it brought up
        removed += remove_cpu_lock(self.state_dir.parent)
        return removed

    def everything(self) -> Names:
        """The names of the most clients a testbed can have: what `down` looks for, whichever number
        of clients the last `up` brought up (the names follow from the inventory alone)."""
        return Names.of(self.inv, clients=MAX_CLIENTS)

    def ovs_daemons(self) -> list[int]:
        """The appliance's ovsdb-server and ovs-vswitchd that run, by their pid files in our run dir."""
        return daemon_pids(Path(self.switch_args()["rundir"]), ("ovs-vswitchd", "ovsdb-server"))


def unload_ovs_module() -> list[str]:
    """Unload the openvswitch module a testbed's `up` loaded, once no datapath uses it (another
    testbed's still does: the kernel refuses, and the last `down` unloads it)."""
    if not OVS_MODULE_MARK.exists():
        return []
    if run(["modprobe", "-r", "-q", OVS_MODULE], check=False).returncode != 0:
        return []
    OVS_MODULE_MARK.unlink(missing_ok=True)
    return [f"module {OVS_MODULE}"]


def _netns_pids(ns: str) -> list[int]:
    return [int(p) for p in run(["ip", "netns", "pids", ns], check=False).stdout.split()]
