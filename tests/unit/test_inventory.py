import textwrap
from pathlib import Path

import pytest

from contracts.errors import UserError
from contracts.profiles import MALLOC_ENV
from testbed.backends.topology import Names, plan
from testbed.inventory import DEFAULT_INVENTORY, load_inventory

GOOD = """\
backend: netns
prefix: tb
hosts:
  - role: client
    name: client
    address: 10.77.0.1/24
  - role: appliance
    name: appliance
  - role: server
    name: server
    address: 10.77.0.2/24
link:
  rate: 20mbit
client_cpu:
  cpu_quota: 0.05
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_repository_inventory_loads():
    inv = load_inventory(DEFAULT_INVENTORY)
    assert inv.backend == "netns"
    assert set(inv.hosts) == {"client", "appliance", "server"}


def test_good_inventory(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD))
    assert inv.link.up_rate == inv.link.down_rate == 20_000_000
    assert inv.client_cpu.cpu_quota == 0.05
    assert str(inv.host("client").address) == "10.77.0.1/24"
    assert inv.host("appliance").address is None


@pytest.mark.parametrize(
    ("change", "message", "line"),
    [
        (("rate: 20mbit", "rate: fast"), "link.rate", 13),
        (("rate: 20mbit", "rate: 0"), "link.rate", 13),
        (("cpu_quota: 0.05", "cpu_quota: 5"), "client_cpu.cpu_quota", 15),
        (("backend: netns", "backend: vms"), "backend", 1),
        (("address: 10.77.0.1/24", "address: 10.77.0.300/24"), "hosts[0].address", 6),
        (("address: 10.77.0.2/24", "address: 10.99.0.2/24"), "hosts", 3),
        (("role: server", "role: client"), "role", 9),
        (("link:", "links:"), "links", 12),
        (("prefix: tb", "prefix: my-very-long-prefix"), "prefix", 2),
        (("    name: appliance\n", ""), "hosts[1].name", 7),
        (("cpu_quota: 0.05", "cpu_quota: 0.05\n  blas_core: '$(x)'"), "client_cpu.blas_core", 16),
    ],
)
def test_bad_inventory_names_key_and_line(tmp_path, change, message, line):
    with pytest.raises(UserError) as info:
        load_inventory(write(tmp_path, GOOD.replace(*change)))
    text = str(info.value)
    assert message in text
    assert f"inventory.yaml:{line}:" in text


def test_missing_role_is_reported(tmp_path):
    text = GOOD.replace("  - role: server\n    name: server\n    address: 10.77.0.2/24\n", "")
    with pytest.raises(UserError, match="no host with role server"):
        load_inventory(write(tmp_path, text))


def test_malformed_yaml_names_the_line(tmp_path):
    with pytest.raises(UserError, match=r"inventory.yaml:\d+: malformed YAML"):
        load_inventory(write(tmp_path, GOOD + "link: [unclosed\n"))


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_inventory(tmp_path / "nope.yaml")


def test_ssh_backend_needs_ssh_details_per_host(tmp_path):
    with pytest.raises(UserError, match=r"hosts\[0\]\.ssh': is missing"):
        load_inventory(write(tmp_path, GOOD.replace("backend: netns", "backend: ssh")))


def test_every_created_name_carries_the_prefix_and_fits_linux_limits(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD.replace("prefix: tb", "prefix: lab42")))
    names = Names.of(inv)
    for name in (*names.namespaces, *names.links, names.bridge, names.cgroup):
        assert name.startswith("lab42-")
    for ifname in (*names.links, names.bridge):
        assert len(ifname) <= 15


def test_topology_plan_wires_client_and_server_through_the_appliance(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD))
    steps = [str(s) for s in plan(inv)]
    assert "ip netns add tb-appliance" in steps
    assert "ip link add tb-c0 netns tb-client type veth peer name tb-a0 netns tb-appliance" in steps
    assert "ip link add tb-s0 netns tb-server type veth peer name tb-a1 netns tb-appliance" in steps
    assert "ip -n tb-client addr add 10.77.0.1/24 dev tb-c0" in steps
    assert steps.index("ip netns add tb-client") < steps.index(
        "ip link add tb-c0 netns tb-client type veth peer name tb-a0 netns tb-appliance"
    )


def test_the_ssh_example_inventory_describes_a_valid_lab(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("not really a key")
    text = (Path(__file__).resolve().parents[2] / "inventory.ssh.example.yaml").read_text()
    inv = load_inventory(write(tmp_path, text.replace("~/.ssh/id_ed25519", str(key))))
    assert inv.backend == "ssh"
    assert inv.host("appliance").ports == ("enp3s0", "enp4s0")
    assert inv.host("client").ssh.key == str(key)
    assert inv.host("server").ssh.user == "labadmin"


def test_an_ssh_lab_lists_each_client_machine_and_the_embedded_testbed_one_client(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("not really a key")
    text = (Path(__file__).resolve().parents[2] / "inventory.ssh.example.yaml").read_text()
    text = text.replace("~/.ssh/id_ed25519", str(key))
    further = "\n".join(
        line.replace("  # ", "  ", 1) for line in text.splitlines() if line.startswith("  # ")
    )
    further = further[further.index("  - role: client") :]
    lab = text.replace("  - role: appliance", f"{further}\n  - role: appliance", 1)
    inv = load_inventory(write(tmp_path, lab))
    assert inv.listed_clients == ("client", "client2") and inv.client_roles == ("client",)
    phone = inv.with_clients(2).host("client2")
    assert (phone.name, str(phone.address), phone.interface) == ("phone", "10.77.0.3/24", "wlan0")
    with pytest.raises(UserError, match="lists 2 client host"):
        inv.with_clients(3)
    with pytest.raises(UserError, match="distinct addresses"):
        load_inventory(write(tmp_path, lab.replace("10.77.0.3/24", "10.77.0.1/24")))
    with pytest.raises(UserError, match="share a name"):
        load_inventory(write(tmp_path, lab.replace("name: phone", "name: client")))
    twice = GOOD.replace(
        "  - role: appliance",
        "  - role: client\n    name: other\n    address: 10.77.0.3/24\n  - role: appliance",
    )
    with pytest.raises(UserError, match="clients:"):  # embedded: more clients come from the experiment
        load_inventory(write(tmp_path, twice))


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (("interface: enp2s0", "interface: 'eth0; reboot'"), "hosts[0].interface"),
        (("ports: [enp3s0, enp4s0]", "ports: [enp3s0]"), "hosts[1].ports"),
        (("host: server.lab.example.org", "host: 'server $(id)'"), "hosts[2].ssh.host"),
        (("user: labadmin", "user: 'lab admin'"), "hosts[2].ssh.user"),
    ],
)
def test_ssh_values_that_reach_remote_commands_are_validated(tmp_path, change, key):
    key_file = tmp_path / "k"
    key_file.write_text("x")
    text = (Path(__file__).resolve().parents[2] / "inventory.ssh.example.yaml").read_text()
    text = text.replace("~/.ssh/id_ed25519", str(key_file)).replace(*change)
    with pytest.raises(UserError) as info:
        load_inventory(write(tmp_path, text))
    assert f"'{key}'" in str(info.value)


def test_blas_core_models_an_older_device(tmp_path):
    from contracts.profiles import blas_env

    inv = load_inventory(
        write(tmp_path, GOOD.replace("cpu_quota: 0.05", "cpu_quota: 0.05\n  blas_core: Prescott"))
    )
    assert inv.client_cpu.blas_core == "Prescott"
    assert "Prescott" in inv.client_cpu.describe()
    env = blas_env(inv.client_cpu.blas_threads, inv.client_cpu.blas_core)
    assert env["OPENBLAS_CORETYPE"] == "Prescott" and env["OPENBLAS_NUM_THREADS"] == "1"
    assert "OPENBLAS_CORETYPE" not in blas_env(2)


def test_the_thread_cap_holds_opencvs_pool_too():
    """The image filters' OpenCV sizes its pool from its own variable, not OpenMP's: a process started
    with a device's thread cap filters on that many threads."""
    import subprocess
    import sys

    from contracts.profiles import blas_env

    code = "import cv2; print(cv2.getNumThreads())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=blas_env(1), capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "1"


def test_a_server_devices_blas_threads_go_to_every_server_process(tmp_path):
    from testbed.backends.netns import NetnsLab
    from testbed.backends.ssh import SshLab

    inv = load_inventory(write(tmp_path, GOOD))
    assert inv.server_env() == MALLOC_ENV and "OPENBLAS_NUM_THREADS" not in NetnsLab(inv).hosts["server"].env
    (tmp_path / "ssh.yaml").write_text(
        "backend: ssh\nprefix: tbs\nhosts:\n"
        "  - {role: client, name: c, address: 10.77.0.1/24, interface: eth1, ssh: {host: c.example.org}}\n"
        "  - {role: appliance, name: a, ports: [eth1, eth2], ssh: {host: a.example.org}}\n"
        "  - {role: server, name: s, address: 10.77.0.2/24, interface: eth1, ssh: {host: s.example.org}}\n"
    )
    ssh_inv = load_inventory(tmp_path / "ssh.yaml").with_server_blas(1)
    for lab in (NetnsLab(inv.with_server_blas(1)), SshLab(ssh_inv)):
        env = lab.hosts["server"].env
        assert env["OPENBLAS_NUM_THREADS"] == "1" and env["OMP_NUM_THREADS"] == "1", type(lab).__name__
        assert env.items() >= MALLOC_ENV.items()  # freed memory kept: a trial's pages reused by the next
    for lab in (NetnsLab(inv), SshLab(ssh_inv)):  # the client's processes too
        assert lab.hosts["client"].env.items() >= MALLOC_ENV.items(), type(lab).__name__
        assert "OPENBLAS_NUM_THREADS" not in (lab.hosts["appliance"].env or {})


def test_an_ssh_hosts_code_is_every_module_of_the_roles_the_agent_and_the_core():
    """What `up` ships to an SSH lab's hosts: exactly the project's files of those packages (an empty
    archive would go unnoticed wherever the hosts share this machine's file system, as in the tests)."""
    import io
    import tarfile

    from testbed.backends.ssh import DATA, PACKAGES, REPO, code_archive

    with tarfile.open(fileobj=io.BytesIO(code_archive()), mode="r:gz") as tar:
        shipped = sorted(tar.getnames())
    expected = sorted(
        str(p.relative_to(REPO)) for pkg in PACKAGES for d in DATA for p in (REPO / pkg).rglob(d)
    )
    assert shipped == expected and "agent/__main__.py" in shipped and "contracts/hosts.py" in shipped
    assert "contracts/rpc_study.tagless" in shipped  # the servers read the schema at start
    assert not any(name.startswith("testbed/") for name in shipped)


def test_the_tagless_ports_default_and_must_be_their_own(tmp_path):
    assert load_inventory(write(tmp_path, GOOD)).tagless_port == 50061
    services = GOOD + "services:\n  grpc_port: 50051\n  tagless_port: {port}\n"
    assert load_inventory(write(tmp_path, services.format(port=40000))).tagless_port == 40000
    for port, words in ((50054, "include grpc_port's port"), (65535, "go past 65535")):
        with pytest.raises(UserError, match=words) as info:
            load_inventory(write(tmp_path, services.format(port=port)))
        assert "services.tagless_port" in str(info.value)
