"""A real three-machine lab driven over SSH: the same testbed as the embedded one, on real hosts.

`up` checks every host first and reports every problem in one list; then it syncs the project's
code, builds the appliance's bridge (kernel datapath where the module is loaded, userspace
otherwise), adds the data-plane addresses that are missing, applies the CPU limit and starts the
services. Each host keeps a record of what `up` did there, written as it goes, and `down` undoes
exactly that, so pre-existing configuration is never touched.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path, PurePosixPath

from contracts import agent_api as api
from contracts.agent_answers import PortPlan
from contracts.errors import UserError
from contracts.hosts import Role
from contracts.profiles import LinkSpec, blas_env
from testbed.backends.lab import Lab
from testbed.backends.ssh_host import SshHost
from testbed.inventory import Inventory

REPO = Path(__file__).resolve().parents[2]  # testbed/backends/ssh.py -> the repository
PACKAGES = ("contracts", "agent", "appliance", "client", "server")  # what a host needs: never testbed/
# and the data files they read at run time: the tagless transport's schema (contracts/rpc_study.tagless)
DATA = ("*.py", "*.tagless")


def code_archive() -> bytes:
    """The roles, the agent and the core as a tar.gz: what runs on the lab's hosts is what runs here."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for package in PACKAGES:
            for path in sorted(p for pattern in DATA for p in (REPO / package).rglob(pattern)):
                tar.add(path, arcname=str(path.relative_to(REPO)))
    return buf.getvalue()


class SshLab(Lab):
    clients_share_a_machine = False  # each client host is a machine of its own

    def __init__(self, inv: Inventory) -> None:
        self.inv = inv
        # per host, so that hosts sharing a filesystem (as in the tests) keep apart
        self.state_root = PurePosixPath("/run/testbed") / inv.prefix
        self.code_root = PurePosixPath("/var/lib/testbed") / inv.prefix
        self.bridge = inv.resource("br0")
        self.cgroup = inv.resource("client")
        self.probes = {}
        ports = inv.host("appliance").ports
        self.down_if, self.up_if = ports
        self.hosts = {role: self._ssh_host(role) for role in (*inv.client_roles, "appliance", "server")}
        self.rundir = str(self.hosts["appliance"].state_dir / "ovs")
        self._switch_record: dict | None = None  # the appliance's record once `up` wrote the bridge

    def _ssh_host(self, role: str) -> SshHost:
        """The lab's machine of `role`; a client's processes run in its CPU limit's cgroup."""
        spec, inv = self.inv.host(role), self.inv
        client = role in inv.listed_clients
        env = None
        if client:
            env = blas_env(inv.client_cpu.blas_threads, inv.client_cpu.blas_core)
        elif role == Role.SERVER:
            env = inv.server_env() or None
        return SshHost(
            spec,
            self.state_root / spec.name,
            self.code_root / spec.name / "src",
            cgroup=self._cgroup(role) if client and inv.client_cpu.cpu_quota else None,
            env=env,
        )

    def find_host(self, name: str) -> SshHost:
        """Also a client machine the inventory lists beyond those this command was told of (`exec
        client2 -- ...` after `up --clients 2`)."""
        for role in self.inv.listed_clients:
            if role not in self.hosts and name in (role, self.inv.host(role).name):
                self.hosts[role] = self._ssh_host(role)
        return super().find_host(name)

    def _cgroup(self, role: str) -> str:
        """A client machine's cgroup: PREFIX-client, PREFIX-client2 ... (machines of a lab may share
        a cgroup hierarchy, as the test lab's namespaces do, so each client's has its own name)."""
        return self.inv.resource(role)

    def client_cgroups(self) -> dict[str, str]:
        return {role: self._cgroup(role) for role in self.client_roles}

    def switch_args(self) -> dict:
        """Read from the appliance's record of `up` once it says what `up` chose (the sweep asks after
        every trial: one read over SSH, not one per trial)."""
        record = self._switch_record or self._read_record(self.host("appliance")) or {}
        if "datapath" in record:
            self._switch_record = record
        return {"bridge": self.bridge, "rundir": self.rundir, "own": not record.get("system_ovs")}

    def datapath(self) -> str:
        """What `up` chose from the appliance's probe (the kernel module loaded: system)."""
        self.switch_args()
        record = self._switch_record or {}
        if "datapath" in record:
            return record["datapath"]
        probe = self.probes.get("appliance")
        return "system" if probe and probe.ovs_kernel_module else "netdev"

    # ---------------------------------------------------------------- records of what up did
    def _record_path(self, host: SshHost) -> str:
        return str(host.state_dir / "up.json")

    def _record(self, host: SshHost, **changes) -> None:
        record = self._read_record(host) or {}
        for key, value in changes.items():
            if isinstance(value, list):
                record.setdefault(key, []).extend(value)
            else:
                record[key] = value
        host.run(["mkdir", "-p", str(host.state_dir)], limited=False)
        host.write(json.dumps(record).encode(), self._record_path(host))

    def _read_record(self, host: SshHost) -> dict | None:
        text = host.read(self._record_path(host))
        return json.loads(text) if text else None

    # ---------------------------------------------------------------- checks
    def is_up(self) -> bool:
        record = self._read_record(self.host("appliance"))
        return bool(record and record.get("complete"))

    def preflight(self) -> list[str]:
        problems: list[str] = []
        for role, host in self.hosts.items():
            try:
                problems += [f"{host.name} ({host.where}): {p}" for p in self._check_host(role, host)]
            except UserError as exc:
                problems.append(exc.message)
        if problems:  # leave no host half-configured: take back the code synced for the check
            for host in self.hosts.values():
                try:
                    host.run(["rm", "-rf", str(host.code_dir.parent)], limited=False, check=False)
                    host.run(
                        ["rmdir", "--ignore-fail-on-non-empty", str(self.code_root)],
                        limited=False,
                        check=False,
                    )
                except UserError:
                    pass
        return problems

    def _check_host(self, role: str, host: SshHost) -> list[str]:
        ident = host.run(["id", "-u"], check=False, limited=False)
        if not ident.ok:
            return [
                f"cannot run commands{' with sudo -n' if host.spec.ssh.user != 'root' else ''}: "
                f"{ident.stderr.strip()[-200:]} (give the user root or password-less sudo)"
            ]
        version = host.run([host.spec.python, "--version"], check=False, limited=False)
        if not version.ok:
            return [
                f"no Python at {host.spec.python!r} (install python3, or set the host's python in the inventory)"
            ]
        self.sync(host)
        interfaces = list(host.spec.ports or ()) + ([host.spec.interface] if host.spec.interface else [])
        return self.probe(role, interfaces)

    def sync(self, host: SshHost) -> None:
        """Install the project's role code on the host (a fresh copy on every `up`)."""
        archive = str(host.code_dir.parent / "src.tar.gz")
        host.run(["mkdir", "-p", str(host.code_dir.parent)], limited=False)
        host.write(code_archive(), archive)
        host.run(["rm", "-rf", str(host.code_dir)], limited=False)
        host.run([host.spec.python, "-m", "tarfile", "-e", archive, str(host.code_dir)], limited=False)

    # ---------------------------------------------------------------- up
    def _up(self) -> None:
        appliance = self.host("appliance")
        probe = self.probes.get("appliance")
        datapath = "system" if probe and probe.ovs_kernel_module else "netdev"
        # an appliance that runs Open vSwitch already keeps its daemons: the bridge joins its database
        own = not (probe and probe.system_ovs)
        # how many client machines: `down` must reach those, and the others it only tries
        self._record(appliance, own_ovs=own, system_ovs=not own, clients=len(self.client_roles))
        appliance.agent(
            api.BridgeUp(
                bridge=self.bridge,
                ports=(self.down_if, self.up_if),
                rundir=self.rundir,
                datapath=datapath,
                own=own,
            )
        )
        self._record(appliance, bridge=self.bridge, datapath=datapath)
        if datapath == "netdev":
            # the userspace datapath forwards packets as the NIC handed them: checksums must be filled in
            for ifname in (self.down_if, self.up_if):
                self._tx_offload_off(appliance, ifname)
        for role in (*self.client_roles, "server"):
            host = self.host(role)
            spec = self.inv.host(role)
            present = host.run(
                ["ip", "-o", "-4", "addr", "show", "dev", spec.interface], limited=False
            ).stdout
            if str(spec.address) not in present.split():
                host.run(["ip", "addr", "add", str(spec.address), "dev", spec.interface], limited=False)
                self._record(host, addresses=[[str(spec.address), spec.interface]])
            if datapath == "netdev":
                self._tx_offload_off(host, spec.interface)
        self.apply_cpu_limit()

    def _tx_offload_off(self, host: SshHost, ifname: str) -> None:
        state = host.run(["ethtool", "-k", ifname], limited=False, check=False).stdout
        if "tx-checksumming: on" in state:
            host.run(["ethtool", "-K", ifname, "tx", "off"], limited=False)
            self._record(host, tx_offload_off=[ifname])

    def _mark_up(self) -> None:
        self._record(self.host("appliance"), complete=True)

    def up(self, start_server: bool = True) -> bool:
        """As everywhere; a lab up with other client machines than asked for is refused (a sweep of
        two clients on a lab up with one would find the second unconfigured)."""
        record = self._read_record(self.host("appliance")) or {}
        running = record.get("clients", 1)
        if record.get("complete") and self.inv.clients not in (1, running):
            raise UserError(
                f"the SSH lab is up with {running} client machine(s), not {self.inv.clients}",
                "run `testbed down` first",
            )
        return super().up(start_server)

    # ---------------------------------------------------------------- down
    def down(self) -> list[str]:
        """Undo on every host what `up` recorded there; unreachable hosts are reported, not skipped
        silently. Every client machine the inventory lists: `up` may have used more of them than this
        command was told (`--clients`); one that `up` did not use (the appliance's record says how
        many it used) is only tried, since nothing of the tool's can be on it."""
        removed: list[str] = []
        problems: list[str] = []
        self._switch_record = None
        try:
            used = (self._read_record(self.host("appliance")) or {}).get("clients", 1)
        except UserError:  # the appliance is reported below
            used = 1
        needed = self.inv.listed_clients[: max(used, self.inv.clients)]
        for role in ("server", *self.inv.listed_clients, "appliance"):
            host = self.hosts.get(role) or self._ssh_host(role)
            try:
                removed += self._down_host(role, host)
            except UserError as exc:
                if role in needed or role not in self.inv.listed_clients:
                    problems.append(str(exc))  # with its own fix: each host may need a different one
            finally:
                host.close()
        if problems:
            raise UserError(
                "testbed down could not reach every host: "
                + "; ".join(problems)
                + (f" (removed elsewhere: {', '.join(removed)})" if removed else ""),
                "fix the connection and run testbed down again",
            )
        return removed

    def _down_host(self, role: str, host: SshHost) -> list[str]:
        record = self._read_record(host) or {}
        removed = []
        code_there = host.run(["test", "-d", str(host.code_dir)], limited=False, check=False).ok
        if code_there:  # the agent is there to ask (a host that `up` never reached has nothing of ours)
            for service in ("offload", "iperf3"):
                if host.stop(service):
                    removed.append(f"{host.name}: {service} service")
        if role == Role.APPLIANCE and code_there and (record.get("bridge") or record.get("own_ovs")):
            self.clear_shaping()
            removed.append(f"{host.name}: qdiscs on {self.up_if}, {self.down_if}")
            own = bool(record.get("own_ovs"))
            host.agent(api.BridgeDown(bridge=self.bridge, rundir=self.rundir, own=own))
            removed.append(
                f"{host.name}: bridge {self.bridge}" + (", ovsdb-server, ovs-vswitchd" if own else "")
            )
        for address, ifname in record.get("addresses", []):
            host.run(["ip", "addr", "del", address, "dev", ifname], limited=False, check=False)
            removed.append(f"{host.name}: address {address} on {ifname}")
        for ifname in record.get("tx_offload_off", []):
            host.run(["ethtool", "-K", ifname, "tx", "on"], limited=False, check=False)
        if record.get("cgroup") and code_there and host.agent(api.CpuRemove(name=record["cgroup"])):
            removed.append(f"{host.name}: cgroup {record['cgroup']}")
        host.run(["rm", "-rf", str(host.state_dir), str(host.code_dir.parent)], limited=False, check=False)
        host.run(
            ["rmdir", "--ignore-fail-on-non-empty", str(self.state_root), str(self.code_root)],
            limited=False,
            check=False,
        )
        return removed

    # ---------------------------------------------------------------- shaping and CPU limit
    def shape(self, link: LinkSpec, dry_run: bool = False) -> list[PortPlan]:
        """As everywhere; a plan asked for while the lab is down comes from the appliance all the same."""
        if not dry_run or self.is_up():
            return super().shape(link, dry_run)
        appliance = self.host("appliance")
        self.sync(appliance)  # the agent, briefly, so that the plan uses the appliance's kernel
        try:
            return super().shape(link, dry_run)
        finally:
            appliance.run(["rm", "-rf", str(appliance.code_dir.parent)], limited=False, check=False)
            appliance.run(
                ["rmdir", "--ignore-fail-on-non-empty", str(self.code_root)], limited=False, check=False
            )

    def apply_cpu_limit(self) -> None:
        if self.inv.client_cpu.cpu_quota:
            super().apply_cpu_limit()
            for role, cgroup in self.client_cgroups().items():
                self._record(self.host(role), cgroup=cgroup)
