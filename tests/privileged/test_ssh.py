"""The SSH backend against three "machines": namespaces each running their own sshd.

The control side (this test and the testbed CLI) stays in the root namespace and reaches each host
over a management veth; the hosts are wired client-eth1 <-> eth1-appliance-eth2 <-> eth1-server,
as a real lab's cables would be. With a second client machine, both clients and the appliance's
eth1 are cabled to a switch (a Linux bridge in a namespace of its own), as in a lab.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.ssh_appliance import SSHD_CONFIG
from tests.helpers import rows, run_cli, start_sweep, wait_for_rows
from tests.isolation import Lease, leftovers

pytestmark = pytest.mark.privileged

HOSTS = {"client": 1, "appliance": 2, "server": 3}
TWO_CLIENTS = {**HOSTS, "client2": 4}  # a second client machine, behind the lab's switch
DATA = {"client": 1, "server": 2, "client2": 3}  # data-plane addresses' host parts


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if check and done.returncode:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done


@dataclass(frozen=True)
class Lab:
    """One test's three SSH "machines": their names and addresses come from its lease (the tool's
    prefix; the data plane in its first subnet; a /29 management link per host in its second)."""

    lease: Lease
    tmp: Path
    key: Path
    machines: tuple[str, ...] = tuple(HOSTS)  # the roles of its machines (each an sshd)

    @property
    def prefix(self) -> str:
        return self.lease.prefix

    def ns(self, role: str) -> str:
        return self.lease.name(f"ssh-{role}")

    def cable(self, role: str) -> str:
        """The root namespace's end of the host's management veth."""
        return self.lease.name(f"m{role[0]}{role[-1] if role[-1].isdigit() else ''}")

    def control(self, role: str) -> str:
        """The root namespace's address on the host's management link."""
        return self.lease.address(8 * TWO_CLIENTS[role] + 1, subnet=1)

    def host(self, role: str, nobody: bool = False) -> str:
        """The host's address on its management link (what SSH reaches), or with `nobody` one on the
        same link that no machine answers."""
        return self.lease.address(8 * TWO_CLIENTS[role] + (3 if nobody else 2), subnet=1)

    def data(self, role: str) -> str:
        return f"{self.lease.address(DATA[role])}/24"

    def where(self, role: str, nobody: bool = False) -> str:
        """How the tool names the host in its messages."""
        return f"{role} (root@{self.host(role, nobody)}:22)"


def remove_lab(lab: Lab) -> None:
    """Remove the lab's namespaces and cables, also those a killed earlier run left behind."""
    for role in (*lab.machines, "switch"):
        for pid in sh("ip", "netns", "pids", lab.ns(role), check=False).stdout.split():
            sh("kill", "-9", pid, check=False)
        sh("ip", "netns", "delete", lab.ns(role), check=False)
        sh("ip", "link", "delete", lab.cable(role), check=False)


def inventory_text(
    lab: Lab,
    *,
    client_host: str | None = None,
    appliance_ports=("eth1", "eth2"),
    server_python: str | None = None,
    client_key: Path | None = None,
    host_key: str = "accept-new",
) -> str:
    python = sys.executable
    trust = f"known_hosts: {lab.tmp / 'known_hosts'}, host_key: {host_key}"
    server_port, iperf_port, grpc_port = lab.lease.ports[:3]
    further = "".join(
        f"""
          - role: client
            name: {role}
            address: {lab.data(role)}
            interface: eth1
            python: {python}
            ssh: {{host: {lab.host(role)}, user: root, key: {lab.key}, {trust}}}"""
        for role in lab.machines
        if role.startswith("client") and role != "client"
    )
    return textwrap.dedent(f"""\
        backend: ssh
        prefix: {lab.prefix}
        hosts:
          - role: client
            name: client
            address: {lab.data("client")}
            interface: eth1
            python: {python}
            ssh: {{host: {client_host or lab.host("client")}, user: root, key: {client_key or lab.key}, {trust}}}{further}
          - role: appliance
            name: appliance
            ports: [{appliance_ports[0]}, {appliance_ports[1]}]
            python: {python}
            ssh: {{host: {lab.host("appliance")}, user: root, key: {lab.key}, {trust}}}
          - role: server
            name: server
            address: {lab.data("server")}
            interface: eth1
            python: {server_python or python}
            ssh: {{host: {lab.host("server")}, user: root, key: {lab.key}, {trust}}}
        link:
          rate: 100mbit
        client_cpu:
          cpu_quota: 0.5
        services:
          server_port: {server_port}
          iperf3_port: {iperf_port}
          grpc_port: {grpc_port}
          tagless_port: {lab.lease.tagless_port}
        """)


def host_leftovers(lab: Lab) -> list[str]:
    """What the tool left on the lab's hosts (the lab's own sshd and cables do not count)."""
    found = []
    for role in lab.machines:
        for line in sh("ip", "netns", "pids", lab.ns(role), check=False).stdout.split():
            cmd = Path(f"/proc/{line}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "sshd" not in cmd:
                found.append(f"{role}: process {cmd.strip()}")
        addrs = sh("ip", "-n", lab.ns(role), "-o", "-4", "addr", "show", check=False).stdout
        found += [
            f"{role}: address {lab.data(r)}" for r in DATA if r in lab.machines and lab.data(r) in addrs
        ]
    for dev in ("eth1", "eth2"):
        if "htb" in sh("ip", "netns", "exec", lab.ns("appliance"), "tc", "qdisc", "show", "dev", dev).stdout:
            found.append(f"appliance: htb on {dev}")
    for path in (
        f"/run/testbed/{lab.prefix}",
        f"/var/lib/testbed/{lab.prefix}",
        *(f"/sys/fs/cgroup/cpu/{lab.prefix}-{r}" for r in lab.machines if r.startswith("client")),
    ):
        if Path(path).exists():
            found.append(path)
    return found


@pytest.fixture
def lab_hosts(tmp_path, leases):
    """Three namespaces, each running an sshd of its own on its management link, wired as a lab."""
    yield from ssh_machines(Lab(leases(subnets=2), tmp_path, tmp_path / "id_ed25519"))


@pytest.fixture
def two_client_lab(tmp_path, leases):
    """The lab with a second client machine: both clients and the appliance on the lab's switch."""
    yield from ssh_machines(Lab(leases(subnets=2), tmp_path, tmp_path / "id_ed25519", tuple(TWO_CLIENTS)))


def cable(lab: Lab, role: str, dev: str, peer_role: str, peer_dev: str) -> None:
    """A data-plane cable: a veth from `role`'s `dev` to `peer_role`'s `peer_dev`."""
    sh("ip", "-n", lab.ns(role), "link", "add", dev, "type", "veth", "peer", "name", peer_dev,
       "netns", lab.ns(peer_role))  # fmt: skip


def ssh_machines(lab: Lab):
    """Each of the lab's machines a namespace running an sshd of its own on its management link,
    cabled as a lab; yields the lab, then removes it."""
    tmp_path, key = lab.tmp, lab.key
    if not Path("/usr/sbin/sshd").exists():
        pytest.fail("sshd is missing: scripts/setup.sh installs openssh-server")
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "hostkey"))
    shutil.copy(f"{key}.pub", tmp_path / "authorized_keys")
    (tmp_path / "sshd_config").write_text(SSHD_CONFIG.format(tmp=tmp_path))
    # sshd's privilege-separation directory stays: another run's sshd may need it (and openssh-server's
    # own service makes it too)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    daemons = []
    remove_lab(lab)
    try:
        for role in lab.machines:
            sh("ip", "netns", "add", lab.ns(role))
            sh(
                "ip",
                "link",
                "add",
                lab.cable(role),
                "type",
                "veth",
                "peer",
                "name",
                "mgmt0",
                "netns",
                lab.ns(role),
            )
            sh("ip", "addr", "add", f"{lab.control(role)}/29", "dev", lab.cable(role))
            sh("ip", "link", "set", lab.cable(role), "up")
            sh("ip", "-n", lab.ns(role), "addr", "add", f"{lab.host(role)}/29", "dev", "mgmt0")
            sh("ip", "-n", lab.ns(role), "link", "set", "mgmt0", "up")
            sh("ip", "-n", lab.ns(role), "link", "set", "lo", "up")
        cable(lab, "server", "eth1", "appliance", "eth2")
        ends = [("server", "eth1"), ("appliance", "eth2")]
        clients = [r for r in lab.machines if r.startswith("client")]
        if len(clients) == 1:
            cable(lab, "client", "eth1", "appliance", "eth1")
            ends += [("client", "eth1"), ("appliance", "eth1")]
        else:  # the lab's switch: the clients and the appliance's client-side port on one bridge
            sh("ip", "netns", "add", lab.ns("switch"))
            sh("ip", "-n", lab.ns("switch"), "link", "add", "br0", "type", "bridge")
            for i, role in enumerate(["appliance", *clients]):
                cable(lab, role, "eth1", "switch", f"p{i}")
                sh("ip", "-n", lab.ns("switch"), "link", "set", f"p{i}", "master", "br0")
                ends += [(role, "eth1"), ("switch", f"p{i}")]
            ends.append(("switch", "br0"))
        for role, dev in ends:
            sh("ip", "-n", lab.ns(role), "link", "set", dev, "up")
        for role in lab.machines:
            # `ip netns exec` gives the host a sysfs of its own; mount the cgroup cpu hierarchy in it, as a
            # real machine has, then run sshd there
            boot = (
                "mount -t tmpfs cgroups /sys/fs/cgroup && mkdir /sys/fs/cgroup/cpu && "
                'mount -t cgroup -o cpu cgroup /sys/fs/cgroup/cpu && exec /usr/sbin/sshd "$@"'
            )
            if not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists():  # a cgroup v2 machine
                boot = 'mount -t cgroup2 none /sys/fs/cgroup && exec /usr/sbin/sshd "$@"'
            daemons.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        lab.ns(role),
                        "sh",
                        "-c",
                        boot,
                        "sshd",
                        "-D",
                        "-e",
                        "-f",
                        str(tmp_path / "sshd_config"),
                        "-o",
                        f"ListenAddress={lab.host(role)}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.monotonic() + 20
        for role in lab.machines:
            while (
                sh("ip", "netns", "exec", lab.ns("client"), "true").returncode == 0
                and time.monotonic() < deadline
            ):
                probe = subprocess.run(
                    [
                        "ssh",
                        "-i",
                        str(key),
                        "-o",
                        "StrictHostKeyChecking=no",
                        "-o",
                        "UserKnownHostsFile=/dev/null",
                        "-o",
                        "BatchMode=yes",
                        "-o",
                        "ConnectTimeout=2",
                        f"root@{lab.host(role)}",
                        "true",
                    ],
                    capture_output=True,
                )
                if probe.returncode == 0:
                    break
                time.sleep(0.3)
        yield lab
    finally:
        for d in daemons:
            d.terminate()
            d.wait(timeout=10)
        remove_lab(lab)
    assert leftovers(lab.prefix) == []  # the lab's namespaces and cables, and the tool's state here


def test_up_shape_validate_sweep_down_over_ssh(lab_hosts):
    lab = lab_hosts
    tmp = lab.tmp
    inv = tmp / "inventory.yaml"
    inv.write_text(inventory_text(lab))
    try:
        out = run_cli(inv, "up").stdout
        assert f"root@{lab.host('appliance')}:22" in out
        status = json.loads(run_cli(inv, "status", "--json").stdout)
        assert status["up"] and status["backend"] == "ssh"
        # the kernel datapath where the appliance's kernel has Open vSwitch's module, else the userspace one
        kernel_ovs = Path("/sys/module/openvswitch").exists()
        assert status["bridge"]["datapath_type"] == ("system" if kernel_ovs else "netdev")
        assert sorted(status["bridge"]["ports"]) == ["eth1", "eth2"]
        assert status["client_cpu"]["in_force"]["fraction"] == pytest.approx(0.5)
        assert status["services"] == {"iperf3": True, "offload": True, "grpc": True}

        run_cli(inv, "shape", "--rate", "20mbit")
        for dev in ("eth1", "eth2"):
            shown = sh("ip", "netns", "exec", lab.ns("appliance"), "tc", "class", "show", "dev", dev).stdout
            assert "rate 20Mbit" in shown
        # 3 s: in 1 s, TCP's start under the client's quota once measured 5.2% short on a noisy host
        checks = (
            json.loads(Path(tmp / "v.json").read_text())["checks"]
            if run_cli(inv, "validate", "--rates", "20", "--duration", "3", "--json", str(tmp / "v.json"))
            else None
        )
        assert [c["ok"] for c in checks] == [True, True]
        # the client's processes run under the limit on the client host
        assert (
            f"/{lab.prefix}-client" in run_cli(inv, "exec", "client", "--", "cat", "/proc/self/cgroup").stdout
        )

        results = tmp / "results"
        run_cli(
            inv,
            "sweep",
            "--ops",
            "mul",
            "--sizes",
            "40",
            "--rates",
            "20",
            "--methods",
            "raw,json",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--results",
            str(results),
            "--no-analyze",
            "--keep-up",
            "--name",
            "ssh",
        )
        run_dir = next(results.iterdir())
        rows = (run_dir / "trials.csv").read_text().splitlines()[2:]  # after the format's mark and the header
        assert len(rows) == 2 + 2 * 2  # local baseline + (raw, json) x 2 reps
        assert all(",true," in row for row in rows), rows

        # SIGTERM mid-sweep over SSH: the clean line with the resume command, and nothing after it
        proc = start_sweep(
            inv, "--ops", "mul", "--sizes", "40", "--rates", "20", "--methods", "raw,json", "--reps", "50",
            "--warmup", "0", "--no-validate", "--results", str(tmp / "term"), "--no-analyze", "--keep-up",
        )  # fmt: skip
        wait_for_rows(proc, tmp / "term", 3)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 130, out
        assert "--resume" in out.strip().splitlines()[-1], out
        assert "Traceback" not in out and "Exception ignored" not in out, out
    finally:
        run_cli(inv, "down", check=False)
    assert host_leftovers(lab) == []


TWO_CLIENT_SWEEP = """\
name: ssh-clients
ops: [mul]
sizes: [100]
rates: [20]
methods: [raw]
reps: 2
warmup: 0
clients:
  - {device: paper-p4, count: 2}
contention: [1, 2]
validation: {enabled: true, duration: 2, retries: 2, tolerance_pct: 20}
"""


def test_a_sweep_runs_on_two_client_machines_of_an_ssh_lab(two_client_lab):
    """Issue 29 over SSH: two client machines behind the lab's switch, on one shaped link. `up
    --clients 2` gives each its address and its own CPU limit, and `down` without --clients takes
    both back; a sweep's clients calibrate each machine for its device on its own and run a worker
    on each."""
    lab = two_client_lab
    inv = lab.tmp / "inventory.yaml"
    inv.write_text(inventory_text(lab))
    exp = lab.tmp / "clients.yaml"
    exp.write_text(TWO_CLIENT_SWEEP)
    results = lab.tmp / "results"
    try:
        assert "client2 (root@" in run_cli(inv, "up", "--clients", "2").stdout
        assert (
            f"/{lab.prefix}-client2"
            in run_cli(inv, "exec", "client2", "--", "cat", "/proc/self/cgroup").stdout
        )
        removed = run_cli(inv, "down").stdout  # told of one client: it reaches every client listed
        assert (
            f"client2: cgroup {lab.prefix}-client2" in removed and f"address {lab.data('client2')}" in removed
        )
        assert host_leftovers(lab) == []

        out = run_cli(inv, "sweep", str(exp), "--results", str(results), timeout=1800).stdout
        assert "2 clients, 1/2 offloading at once" in out and "sweep complete" in out
    finally:
        run_cli(inv, "down", check=False)
    (run_dir,) = results.iterdir()
    got = rows(run_dir)
    assert all(r["ok"] == "true" for r in got), [r["error"] for r in got if r["ok"] != "true"]
    remote = sorted((r["clients"], r["client"]) for r in got if r["method"] == "raw")
    assert remote == sorted([("1", "1")] * 2 + [("2", "1"), ("2", "2")] * 2)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    calibrations = manifest["device"]["calibrations"]
    assert [c.get("client") for c in calibrations] == [None, "client2"]  # each machine its own
    assert (run_dir / "worker-client2.log").exists()
    assert host_leftovers(lab) == []


def test_every_problem_is_reported_at_once_and_nothing_is_left(lab_hosts):
    lab = lab_hosts
    tmp = lab.tmp
    inv = tmp / "bad.yaml"
    inv.write_text(
        inventory_text(lab, appliance_ports=("eth1", "eth9"), server_python="/nonexistent/python3")
    )
    proc = run_cli(inv, "up", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{lab.where('appliance')}: no interface eth9" in proc.stderr
    assert f"{lab.where('server')}: no Python at '/nonexistent/python3'" in proc.stderr
    assert host_leftovers(lab) == []


def test_unreachable_host_and_wrong_key(lab_hosts):
    lab = lab_hosts
    tmp = lab.tmp
    other = tmp / "other_key"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other))
    inv = tmp / "wrongkey.yaml"
    inv.write_text(inventory_text(lab, client_key=other))
    proc = run_cli(inv, "up", check=False)
    assert proc.returncode == 2 and f"{lab.where('client')}: SSH authentication failed" in proc.stderr

    inv.write_text(inventory_text(lab, client_host=lab.host("client", nobody=True)))
    proc = run_cli(inv, "up", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert lab.where("client", nobody=True) in proc.stderr
    assert host_leftovers(lab) == []


def test_host_keys_are_checked_like_openssh(lab_hosts):
    """strict: an unknown host is refused; accept-new records its key on first contact; a key that
    changed is refused whatever the policy."""
    lab = lab_hosts
    tmp = lab.tmp
    known = tmp / "known_hosts"
    known.unlink(missing_ok=True)
    inv = tmp / "keys.yaml"
    inv.write_text(inventory_text(lab, host_key="strict"))
    # `down` of a lab that is not up reaches every host and changes nothing
    proc = run_cli(inv, "down", check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for host in (lab.where("client"), lab.where("appliance"), lab.where("server")):
        assert f"{host}: its host key is not in {known}" in proc.stderr
    assert "accept-new" in proc.stderr

    inv.write_text(inventory_text(lab, host_key="accept-new"))
    run_cli(inv, "down")
    recorded = known.read_text().splitlines()
    assert {line.split()[0] for line in recorded} == {lab.host(role) for role in HOSTS}

    inv.write_text(inventory_text(lab, host_key="strict"))
    run_cli(inv, "down")  # now known: passes

    impostor = tmp / "impostor"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(impostor))
    fake = impostor.with_suffix(".pub").read_text().split()[:2]
    known.write_text("\n".join(
        f"{line.split()[0]} {' '.join(fake)}" if line.startswith(f"{lab.host('client')} ") else line for line in recorded
    ) + "\n")  # fmt: skip
    for policy in ("strict", "accept-new"):
        inv.write_text(inventory_text(lab, host_key=policy))
        proc = run_cli(inv, "down", check=False)
        assert proc.returncode == 2 and f"{lab.where('client')}: its host key changed" in proc.stderr
        assert f"ssh-keygen -R {lab.host('client')}" in proc.stderr
    assert host_leftovers(lab) == []
