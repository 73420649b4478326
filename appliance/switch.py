"""The appliance's Open vSwitch bridge, with its own daemons and run directory.

The embedded testbed runs ovsdb-server and ovs-vswitchd inside the appliance namespace with a run
directory of the tool's, so nothing of the machine's own Open vSwitch (if any) is touched. Without the
kernel module the bridge uses the userspace datapath (`netdev`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
PROGRAMS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl")


@dataclass(frozen=True)
class Switch:
    bridge: str
    ports: tuple[str, ...]
    rundir: Path
    datapath: str = "netdev"

    @property
    def db(self) -> Path:
        return self.rundir / "conf.db"

    @property
    def sock(self) -> str:
        return f"unix:{self.rundir / 'db.sock'}"

    def env(self) -> dict[str, str]:
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
        return [
            ["ovsdb-tool", "create", str(self.db), str(SCHEMA)],
            self._daemon("ovsdb-server", str(self.db), f"--remote=p{self.sock}"),
            self.vsctl("--no-wait", "init"),
            self._daemon("ovs-vswitchd", self.sock),
            bridge,
        ]

    def plan_down(self) -> list[list[str]]:
        return [
            self.vsctl("--if-exists", "del-br", self.bridge),
            ["ovs-appctl", "-t", str(self.rundir / "ovs-vswitchd.ctl"), "exit"],
            ["ovs-appctl", "-t", str(self.rundir / "ovsdb-server.ctl"), "exit"],
        ]

    def plan_status(self) -> list[str]:
        return self.vsctl(
            "--format=json", "--columns=name,datapath_type,ports", "list", "Bridge", self.bridge
        )
