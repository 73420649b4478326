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

from contracts.command import run
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

    def plan_up(self) -> list[list[str]]:
        """Commands, in order, that bring the bridge up (run on the appliance host)."""
        bridge = [
            *self.vsctl("--may-exist", "add-br", self.bridge),
            "--",
            "set",
            "bridge",
            self.bridge,
            f"datapath_type={self.datapath}",
        ]
        for port in self.ports:
            bridge += ["--", "--may-exist", "add-port", self.bridge, port]
        if not self.own:
            return [bridge]
        return [
            ["ovsdb-tool", "create", str(self.db), str(SCHEMA)],
            self._daemon("ovsdb-server", str(self.db), f"--remote=p{self.sock}"),
            self.vsctl("--no-wait", "init"),
            self._daemon("ovs-vswitchd", self.sock),
            bridge,
        ]

    def plan_down(self) -> list[list[str]]:
        steps = [self.vsctl("--if-exists", "del-br", self.bridge)]
        if self.own:
            steps += [
                ["ovs-appctl", "-t", str(self.rundir / "ovs-vswitchd.ctl"), "exit"],
                ["ovs-appctl", "-t", str(self.rundir / "ovsdb-server.ctl"), "exit"],
            ]
        return steps

    def up(self) -> None:
        if self.own:
            self.rundir.mkdir(parents=True, exist_ok=True)
        for argv in self.plan_up():
            run(argv, host="appliance", env=self.env(), timeout=60)

    def daemons(self) -> list[int]:
        """The pids of our own ovsdb-server and ovs-vswitchd that run (from their pid files)."""
        return daemon_pids(self.rundir, DAEMONS) if self.own else []

    def down(self, grace: float = 5.0) -> bool:
        """Best effort: a bridge or daemon that is already gone is fine. Returns once our daemons have
        exited: `ovs-appctl exit` returns before they do, so they get `grace` s, then SIGTERM, then
        SIGKILL. False if one outlived even that."""
        daemons = [(pid, watch(pid)) for pid in self.daemons()]
        for argv in self.plan_down():
            run(argv, host="appliance", env=self.env(), timeout=30, check=False)
        return stop_all(lambda: [pid for pid, running in daemons if running()], grace=grace, asked=True)
