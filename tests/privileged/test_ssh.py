"""The SSH backend against three "machines": namespaces each running their own sshd.

The control side (this test and the testbed CLI) stays in the root namespace and reaches each host
over a management veth; the hosts are wired client-eth1 <-> eth1-appliance-eth2 <-> eth1-server,
as a real lab's cables would be.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.privileged.test_sweep_e2e import start_sweep, wait_for_rows

pytestmark = pytest.mark.privileged

HOSTS = {"client": 1, "appliance": 2, "server": 3}
PREFIX = "tbs"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if check and done.returncode:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done


def remove_lab() -> None:
    """Remove the lab's namespaces and cables, also those a killed earlier run left behind."""
    for role in HOSTS:
        for pid in sh("ip", "netns", "pids", ns(role), check=False).stdout.split():
            sh("kill", "-9", pid, check=False)
        sh("ip", "netns", "delete", ns(role), check=False)
        sh("ip", "link", "delete", f"sshm-{role[0]}", check=False)


def ns(role: str) -> str:
    return f"sshlab-{role}"


def inventory_text(
    tmp: Path,
    key: Path,
    *,
    client_host: str = "10.97.1.2",
    appliance_ports=("eth1", "eth2"),
    server_python: str | None = None,
    client_key: Path | None = None,
    host_key: str = "accept-new",
) -> str:
    python = sys.executable
    trust = f"known_hosts: {tmp / 'known_hosts'}, host_key: {host_key}"
    return textwrap.dedent(f"""\
        backend: ssh
        prefix: {PREFIX}
        hosts:
          - role: client
            name: client
            address: 10.96.0.1/24
            interface: eth1
            python: {python}
            ssh: {{host: {client_host}, user: root, key: {client_key or key}, {trust}}}
          - role: appliance
            name: appliance
            ports: [{appliance_ports[0]}, {appliance_ports[1]}]
            python: {python}
            ssh: {{host: 10.97.2.2, user: root, key: {key}, {trust}}}
          - role: server
            name: server
            address: 10.96.0.2/24
            interface: eth1
            python: {server_python or python}
            ssh: {{host: 10.97.3.2, user: root, key: {key}, {trust}}}
        link:
          rate: 100mbit
        client_cpu:
          cpu_quota: 0.5
        services:
          server_port: 18090
          iperf3_port: 15210
        """)


def host_leftovers() -> list[str]:
    """What the tool left on the lab's hosts (the lab's own sshd and cables do not count)."""
    found = []
    for role in HOSTS:
        for line in sh("ip", "netns", "pids", ns(role), check=False).stdout.split():
            cmd = Path(f"/proc/{line}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "sshd" not in cmd:
                found.append(f"{role}: process {cmd.strip()}")
        addrs = sh("ip", "-n", ns(role), "-o", "-4", "addr", "show", check=False).stdout
        found += [f"{role}: address {a}" for a in ("10.96.0.1/24", "10.96.0.2/24") if a in addrs]
    for dev in ("eth1", "eth2"):
        if "htb" in sh("ip", "netns", "exec", ns("appliance"), "tc", "qdisc", "show", "dev", dev).stdout:
            found.append(f"appliance: htb on {dev}")
    for path in (
        f"/run/testbed/{PREFIX}",
        f"/var/lib/testbed/{PREFIX}",
        f"/sys/fs/cgroup/cpu/{PREFIX}-client",
    ):
        if Path(path).exists():
            found.append(path)
    return found


@pytest.fixture
def lab_hosts(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("privileged: needs root (CI runs as root)")
    if not Path("/usr/sbin/sshd").exists():
        pytest.fail("sshd is missing: scripts/setup.sh installs openssh-server")
    key = tmp_path / "id_ed25519"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "hostkey"))
    shutil.copy(f"{key}.pub", tmp_path / "authorized_keys")
    (tmp_path / "sshd_config").write_text(
        textwrap.dedent(f"""\
        HostKey {tmp_path}/hostkey
        AuthorizedKeysFile {tmp_path}/authorized_keys
        PermitRootLogin prohibit-password
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        UsePAM no
        StrictModes no
        PidFile none
        Subsystem sftp internal-sftp
        """)
    )
    made_privsep = not Path("/run/sshd").exists()
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    daemons = []
    remove_lab()
    try:
        for role, n in HOSTS.items():
            sh("ip", "netns", "add", ns(role))
            sh(
                "ip",
                "link",
                "add",
                f"sshm-{role[0]}",
                "type",
                "veth",
                "peer",
                "name",
                "mgmt0",
                "netns",
                ns(role),
            )
            sh("ip", "addr", "add", f"10.97.{n}.1/24", "dev", f"sshm-{role[0]}")
            sh("ip", "link", "set", f"sshm-{role[0]}", "up")
            sh("ip", "-n", ns(role), "addr", "add", f"10.97.{n}.2/24", "dev", "mgmt0")
            sh("ip", "-n", ns(role), "link", "set", "mgmt0", "up")
            sh("ip", "-n", ns(role), "link", "set", "lo", "up")
        sh(
            "ip",
            "-n",
            ns("client"),
            "link",
            "add",
            "eth1",
            "type",
            "veth",
            "peer",
            "name",
            "eth1",
            "netns",
            ns("appliance"),
        )
        sh(
            "ip",
            "-n",
            ns("server"),
            "link",
            "add",
            "eth1",
            "type",
            "veth",
            "peer",
            "name",
            "eth2",
            "netns",
            ns("appliance"),
        )
        for role, dev in (
            ("client", "eth1"),
            ("server", "eth1"),
            ("appliance", "eth1"),
            ("appliance", "eth2"),
        ):
            sh("ip", "-n", ns(role), "link", "set", dev, "up")
        for role, n in HOSTS.items():
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
                        ns(role),
                        "sh",
                        "-c",
                        boot,
                        "sshd",
                        "-D",
                        "-e",
                        "-f",
                        str(tmp_path / "sshd_config"),
                        "-o",
                        f"ListenAddress=10.97.{n}.2",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.monotonic() + 20
        for n in HOSTS.values():
            while (
                sh("ip", "netns", "exec", ns("client"), "true").returncode == 0
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
                        f"root@10.97.{n}.2",
                        "true",
                    ],
                    capture_output=True,
                )
                if probe.returncode == 0:
                    break
                time.sleep(0.3)
        yield tmp_path, key
    finally:
        for d in daemons:
            d.terminate()
            d.wait(timeout=10)
        remove_lab()
        if made_privsep:
            shutil.rmtree("/run/sshd", ignore_errors=True)


def test_up_shape_validate_sweep_down_over_ssh(lab_hosts):
    tmp, key = lab_hosts
    inv = tmp / "inventory.yaml"
    inv.write_text(inventory_text(tmp, key))
    try:
        out = run_cli(inv, "up").stdout
        assert "root@10.97.2.2:22" in out
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
            shown = sh("ip", "netns", "exec", ns("appliance"), "tc", "class", "show", "dev", dev).stdout
            assert "rate 20Mbit" in shown
        # 3 s: in 1 s, TCP's start under the client's quota once measured 5.2% short on a noisy host
        checks = (
            json.loads(Path(tmp / "v.json").read_text())["checks"]
            if run_cli(inv, "validate", "--rates", "20", "--duration", "3", "--json", str(tmp / "v.json"))
            else None
        )
        assert [c["ok"] for c in checks] == [True, True]
        # the client's processes run under the limit on the client host
        assert f"/{PREFIX}-client" in run_cli(inv, "exec", "client", "--", "cat", "/proc/self/cgroup").stdout

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
    assert host_leftovers() == []


def test_every_problem_is_reported_at_once_and_nothing_is_left(lab_hosts):
    tmp, key = lab_hosts
    inv = tmp / "bad.yaml"
    inv.write_text(
        inventory_text(tmp, key, appliance_ports=("eth1", "eth9"), server_python="/nonexistent/python3")
    )
    proc = run_cli(inv, "up", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "appliance (root@10.97.2.2:22): no interface eth9" in proc.stderr
    assert "server (root@10.97.3.2:22): no Python at '/nonexistent/python3'" in proc.stderr
    assert host_leftovers() == []


def test_unreachable_host_and_wrong_key(lab_hosts):
    tmp, key = lab_hosts
    other = tmp / "other_key"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other))
    inv = tmp / "wrongkey.yaml"
    inv.write_text(inventory_text(tmp, key, client_key=other))
    proc = run_cli(inv, "up", check=False)
    assert proc.returncode == 2 and "client (root@10.97.1.2:22): SSH authentication failed" in proc.stderr

    inv.write_text(inventory_text(tmp, key, client_host="10.97.1.99"))
    proc = run_cli(inv, "up", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "client (root@10.97.1.99:22)" in proc.stderr
    assert host_leftovers() == []


def test_host_keys_are_checked_like_openssh(lab_hosts):
    """strict: an unknown host is refused; accept-new records its key on first contact; a key that
    changed is refused whatever the policy."""
    tmp, key = lab_hosts
    known = tmp / "known_hosts"
    known.unlink(missing_ok=True)
    inv = tmp / "keys.yaml"
    inv.write_text(inventory_text(tmp, key, host_key="strict"))
    # `down` of a lab that is not up reaches every host and changes nothing
    proc = run_cli(inv, "down", check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for host in ("client (root@10.97.1.2:22)", "appliance (root@10.97.2.2:22)", "server (root@10.97.3.2:22)"):
        assert f"{host}: its host key is not in {known}" in proc.stderr
    assert "accept-new" in proc.stderr

    inv.write_text(inventory_text(tmp, key, host_key="accept-new"))
    run_cli(inv, "down")
    recorded = known.read_text().splitlines()
    assert {line.split()[0] for line in recorded} == {"10.97.1.2", "10.97.2.2", "10.97.3.2"}

    inv.write_text(inventory_text(tmp, key, host_key="strict"))
    run_cli(inv, "down")  # now known: passes

    impostor = tmp / "impostor"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(impostor))
    fake = impostor.with_suffix(".pub").read_text().split()[:2]
    known.write_text("\n".join(
        f"{line.split()[0]} {' '.join(fake)}" if line.startswith("10.97.1.2 ") else line for line in recorded
    ) + "\n")  # fmt: skip
    for policy in ("strict", "accept-new"):
        inv.write_text(inventory_text(tmp, key, host_key=policy))
        proc = run_cli(inv, "down", check=False)
        assert proc.returncode == 2 and "client (root@10.97.1.2:22): its host key changed" in proc.stderr
        assert "ssh-keygen -R 10.97.1.2" in proc.stderr
    assert host_leftovers() == []
