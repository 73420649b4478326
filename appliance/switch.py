"""The appliance's Open vSwitch bridge: its daemons, its ports, and what OVSDB says about them.

The embedded testbed runs ovsdb-server and ovs-vswitchd of its own inside the appliance namespace,
with a run directory of the tool's (`own=True`), so nothing of the machine's Open vSwitch is touched.
A real lab's appliance that already runs Open vSwitch keeps its daemons and database; the bridge is
then added to the system's database (`own=False`). Without the kernel module the bridge uses the
userspace datapath (`netdev`).

`plan_up`/`plan_down` are argv lists that can be printed and tested; `apply` runs them on the host.
Bridge, port and per-interface counters are read through the OVSDB IDL of Open vSwitch's own
Python library (`appliance.ovsdb`), not by parsing ovs-vsctl's output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from appliance.ovsdb import read_bridge
from contracts.command import run
from contracts.errors import UserError
from contracts.processes import daemon_pids, stop_all, watch

SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
SYSTEM_DB = "unix:/var/run/openvswitch/db.sock"
PROGRAMS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-appctl")
DAEMONS = ("ovs-vswitchd", "ovsdb-server")  # what runs, each with RUNDIR/PROGRAM.pid when `own`


@dataclass(frozen=True)
class Switch:
    bridge: str
    ports: tuple[str, ...]
    rundir: Path
    datapath: str = "netdev"
    own: bool = True  # our own daemons and database in `rundir`; False: the system's
    more: tuple[tuple[str, tuple[str, ...]], ...] = ()  # further bridges and their ports, in one database

    @property
    def db(self) -> Path:
        return self.rundir / "conf.db"

    @property
    def sock(self) -> str:
        return f"unix:{self.rundir / 'db.sock'}" if self.own else SYSTEM_DB

    def env(self) -> dict[str, str]:
        if not self.own:
            return {}
        d = str(self.rundir)
        return {
            "OVS_RUNDIR": d,
            "OVS_LOGDIR": d,
            "OVS_DBDIR": d,
            "OVS_SYSCONFDIR": d,
            "OVS_PKGDATADIR": str(SCHEMA.parent),
        }

    def vsctl(self, *args: str) -> list[str]:
        return ["ovs-vsctl", f"--db={self.sock}", "--timeout=10", *args]

    def _daemon(self, program: str, *args: str) -> list[str]:
        r = self.rundir
        return [
            program,
            *args,
            f"--pidfile={r / (program + '.pid')}",
            f"--unixctl={r / (program + '.ctl')}",
            f"--log-file={r / (program + '.log')}",
            "--detach",
            "--no-chdir",
        ]

    @property
    def layout(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Every bridge with its ports: `bridge`, then `more` (several clients: the server's bridge)."""
        return ((self.bridge, self.ports), *self.more)

    def plan_up(self) -> list[list[str]]:
        """Commands, in order, that bring the bridge up (run on the appliance host)."""
        bridges = []
        for name, ports in self.layout:
            argv = [*self.vsctl("--may-exist", "add-br", name), "--", "set", "bridge", name]
            argv.append(f"datapath_type={self.datapath}")
            for port in ports:
                argv += ["--", "--may-exist", "add-port", name, port]
            bridges.append(argv)
        if not self.own:
            return bridges
        return [
            ["ovsdb-tool", "create", str(self.db), str(SCHEMA)],
            self._daemon("ovsdb-server", str(self.db), f"--remote=p{self.sock}"),
            self.vsctl("--no-wait", "init"),
            self._daemon("ovs-vswitchd", self.sock),
            *bridges,
        ]

    def plan_down(self) -> list[list[str]]:
        """Our own daemons are told to exit right after, so the bridges leave the database without
        waiting for ovs-vswitchd (dead, as the sweep's repair finds it, the wait would last the
        whole --timeout), which removes its datapaths as it exits (--cleanup)."""
        if not self.own:
            return [self.vsctl("--if-exists", "del-br", name) for name, _ in self.layout]
        return [
            *(self.vsctl("--no-wait", "--if-exists", "del-br", name) for name, _ in self.layout),
            ["ovs-appctl", "-t", str(self.rundir / "ovs-vswitchd.ctl"), "exit", "--cleanup"],
            ["ovs-appctl", "-t", str(self.rundir / "ovsdb-server.ctl"), "exit"],
        ]

    def up(self) -> None:
        if self.own:
            self.rundir.mkdir(parents=True, exist_ok=True)
        for argv in self.plan_up():
            run(argv, host="appliance", env=self.env(), timeout=60)

    def daemons(self) -> list[int]:
        """The pids of our own ovsdb-server and ovs-vswitchd that run (from their pid files)."""
        return daemon_pids(self.rundir, DAEMONS) if self.own else []

    def problems(self, deep: bool = False) -> list[str]:
        """What is wrong with the switch now, in words naming what was read (empty: healthy).

        Quick (the sweep asks after every trial): our daemons run, by their pid files. `deep` (after a
        failure) also asks the database that the bridge exists with every port.
        """
        dead = [p for p in DAEMONS if self.own and not daemon_pids(self.rundir, (p,))]
        found = [
            f"{p} is not running (no live process has the pid in {self.rundir / (p + '.pid')})" for p in dead
        ]
        if not deep or "ovsdb-server" in dead:
            return found
        for name, ports in self.layout:
            try:
                bridge = read_bridge(self.sock, name, SCHEMA, timeout=5.0)
            except UserError as exc:
                return [*found, exc.message]
            if bridge is None:
                found.append(f"the database at {self.sock} has no bridge {name}")
            else:
                missing = [p for p in ports if p not in bridge["ports"]]
                if missing:
                    found.append(f"bridge {name} lacks port(s) {', '.join(missing)}")
        return found

    def restart(self) -> None:
        """Down, then up with the same commands `up` runs: a fresh database for our own daemons (the
        old one would make `ovsdb-tool create` fail), the bridge and its ports again. On a system's
        Open vSwitch, only the bridge and ports are added back: its daemons are not ours to restart."""
        if self.own:
            self.down()
            self.db.unlink(missing_ok=True)
        self.up()

    def down(self, grace: float = 5.0) -> bool:
        """Best effort: a bridge or daemon that is already gone is fine. Returns once our daemons have
        exited: `ovs-appctl exit` returns before they do, so they get `grace` s, then SIGTERM, then
        SIGKILL. False if one outlived even that."""
        daemons = [(pid, watch(pid)) for pid in self.daemons()]
        for argv in self.plan_down():
            run(argv, host="appliance", env=self.env(), timeout=30, check=False)
        return stop_all(lambda: [pid for pid, running in daemons if running()], grace=grace, asked=True)
