"""Both backends' up/down bookkeeping through fake hosts, without root: which agent verbs each host
gets, in which order, what is recorded, and that `down` undoes exactly what `up` did."""

from __future__ import annotations

import json
import textwrap
from pathlib import PurePosixPath

import pytest

from contracts.errors import UserError
from testbed.backends.ssh import SshLab
from testbed.inventory import load_inventory
from tests.fake_answers import bridge_snapshot, port_plan
from tests.fakes import FakeHost, cgroups, healthy, probe_reply, services, shell


def test_netns_up_asks_each_host_agent_in_order(netns):
    assert netns.up() is True
    client, appliance, server = (netns.hosts[r] for r in ("client", "appliance", "server"))
    assert appliance.verbs() == ["probe", "bridge.up", "shape.apply"]
    assert client.verbs() == ["probe", "cpu.apply", "grpc.ready", "tagless.ready"]
    assert server.verbs() == ["probe", "service.start", "service.start"]
    (bridge,) = appliance.args("bridge.up")
    assert bridge == {
        "ports": ["tbf-a0", "tbf-a1"],
        "datapath": "netdev",
        "bridge": "tbf-br0",
        "rundir": str(netns.state_dir / "ovs"),
        "own": True,
    }
    assert client.args("cpu.apply") == [{"name": "tbf-client", "quota": 0.25}]
    (shape,) = appliance.args("shape.apply")
    assert (shape["up_if"], shape["down_if"], shape["link"]["up_rate"]) == ("tbf-a1", "tbf-a0", 100_000_000)
    iperf, offload = server.args("service.start")
    assert iperf["argv"][0] == "iperf3"
    assert offload["argv"][-8:] == [
        *("--bind", "10.78.0.2", "--port", "18080", "--grpc-port", "50051", "--tagless-port", "50056")
    ]
    assert client.args("grpc.ready") == [{"target": "10.78.0.2:50051", "wait": 60.0}]  # from the client
    assert client.args("tagless.ready") == [{"target": "10.78.0.2:50056", "wait": 60.0}]
    assert client.ran("ethtool") == [["ethtool", "-K", "tbf-c0", "tx", "off"]]
    assert len(appliance.ran("ethtool")) == 2
    assert netns.is_up() and netns.up() is False  # idempotent: nothing asked the second time
    assert appliance.verbs().count("bridge.up") == 1


def test_netns_preflight_lists_every_problem_and_changes_nothing(netns):
    netns.hosts["appliance"].reply("probe", probe_reply(tun=False, ovs_schema=False))
    netns.hosts["server"].reply("probe", lambda **a: {**probe_reply()(**a), "programs": {"iperf3": None}})
    netns.wiring["namespaces"] = ["tbf-client"]
    with pytest.raises(UserError) as exc:
        netns.up()
    message = exc.value.message
    for words in ("/dev/net/tun", "schema", "programs missing: iperf3", "leftovers of an earlier testbed"):
        assert words in message
    assert netns.wiring["applied"] == []
    assert "bridge.up" not in netns.hosts["appliance"].verbs()


def test_a_grpc_port_that_does_not_answer_fails_up_in_one_line_and_takes_it_down(netns):
    netns.hosts["client"].reply("grpc.ready", False)
    with pytest.raises(
        UserError, match=r"gRPC transport at 10\.78\.0\.2:50051 \(python server\) did not answer"
    ) as exc:
        netns.up()
    assert "grpc_port" in exc.value.fix
    assert not netns.is_up() and not netns.state_dir.exists()


def test_status_reports_whether_grpc_answers(netns):
    netns.up()
    netns.hosts["server"].reply("service.status", 42)
    netns.hosts["appliance"].reply("shape.read", {})
    status = netns.status()
    assert status["services"] == {"iperf3": True, "offload": True, "grpc": True}
    assert status["grpc_target"] == "10.78.0.2:50051"
    assert status["tagless_servers"] == {
        "python": {"target": "10.78.0.2:50056", "answers": True},
        "cpp": {"target": "10.78.0.2:50057", "answers": True},
    }
    netns.hosts["client"].reply("grpc.ready", False)
    assert netns.status()["services"]["grpc"] is False


def test_a_tagless_port_that_does_not_answer_fails_up_in_one_line(netns):
    netns.hosts["client"].reply("tagless.ready", False)
    with pytest.raises(UserError, match=r"tagless transport at 10\.78\.0\.2:50056 \(python server\)") as exc:
        netns.up()
    assert "services.tagless_port" in exc.value.fix
    assert not netns.is_up() and not netns.state_dir.exists()


def test_netns_failed_up_is_taken_down(netns):
    def refuse(**args):
        raise UserError("appliance port tbf-a1 does not exist")

    netns.hosts["appliance"].reply("shape.apply", refuse)
    with pytest.raises(UserError, match="tbf-a1"):
        netns.up()
    deleted = [c[3] for c in netns.wiring["commands"] if c[:3] == ["ip", "netns", "delete"]]
    assert sorted(deleted) == sorted(netns.names.namespaces)
    assert netns.hosts["client"].verbs()[-1] == "cpu.remove"
    assert not netns.state_dir.exists() and not netns.is_up()


def test_a_failed_up_whose_clean_up_fails_too_reports_what_stopped_up(netns):
    def refuse(**args):
        raise UserError("appliance port tbf-a1 does not exist")

    def broken(name):
        raise RuntimeError("cgroup file system gone")

    netns.hosts["appliance"].reply("shape.apply", refuse)
    netns.hosts["client"].reply("cpu.remove", broken)
    with pytest.raises(UserError, match="tbf-a1") as failure:
        netns.up()
    assert any("cgroup file system gone" in note for note in failure.value.__notes__)


def test_netns_down_after_a_crash_needs_no_state(netns):
    netns.wiring["namespaces"] = list(netns.names.namespaces)
    cgroups = ["tbf-client"]
    netns.hosts["client"].reply("cpu.remove", lambda name: name in cgroups and not cgroups.remove(name))
    removed = netns.down()
    assert [r for r in removed if r.startswith("netns")] == [f"netns {n}" for n in netns.names.namespaces]
    assert "cgroup tbf-client" in removed
    assert netns.down() == []  # idempotent


def test_netns_switch_takes_the_kernel_datapath_where_the_module_loads_and_down_unloads_it(netns):
    """Issue 48: the embedded testbed's switch forwards in the kernel where the openvswitch module is
    there to load, recorded for status and the sweep; a module `up` loaded leaves with `down`."""
    netns.wiring["ovs_module"] = True
    assert netns.up() is True
    appliance, client = netns.hosts["appliance"], netns.hosts["client"]
    assert ["modprobe", "-q", "openvswitch"] in netns.wiring["commands"]
    (bridge,) = appliance.args("bridge.up")
    assert bridge["datapath"] == "system"
    assert client.ran("ethtool") == [] and appliance.ran("ethtool") == []  # offloads: only userspace's
    assert json.loads((netns.state_dir / "up.json").read_text())["datapath"] == "system"
    assert type(netns)(netns.inv, netns.state_dir).datapath() == "system"  # a later command reads it
    removed = netns.down()
    assert ["modprobe", "-r", "-q", "openvswitch"] in netns.wiring["commands"]
    assert "module openvswitch" in removed and netns.down() == []  # unloaded once


def test_netns_switch_keeps_a_loaded_module_and_falls_back_to_userspace_without_one(netns, monkeypatch):
    netns.up()  # no module here: userspace, as this machine's kernel has it
    assert netns.hosts["appliance"].args("bridge.up")[0]["datapath"] == "netdev"
    assert (
        netns.datapath() == "netdev"
        and ["modprobe", "-r", "-q", "openvswitch"] not in netns.wiring["commands"]
    )
    netns.down()
    assert not any(c[0] == "modprobe" and "-r" in c for c in netns.wiring["commands"])  # nothing to unload
    netns.hosts["appliance"].reply("probe", probe_reply(ovs_kernel_module=True))  # loaded by its owner
    netns.wiring["commands"].clear()
    netns.up()
    assert netns.datapath() == "system" and not any(c[0] == "modprobe" for c in netns.wiring["commands"])
    netns.down()
    assert not any(c[0] == "modprobe" for c in netns.wiring["commands"])  # not ours to unload


# ------------------------------------------------------------------ SSH backend
SSH_INVENTORY = """\
backend: ssh
prefix: tbs
hosts:
  - {role: client, name: client, address: 10.77.0.1/24, interface: eth1, ssh: {host: c.example.org}}
  - {role: appliance, name: appliance, ports: [eth1, eth2], ssh: {host: a.example.org}}
  - {role: server, name: server, address: 10.77.0.2/24, interface: eth1, ssh: {host: s.example.org}}
client_cpu: {cpu_quota: 0.5}
"""


def fake_ssh_host(host) -> FakeHost:
    """A fake of an SSH lab's host scripted for up and down: a root shell over the fake's files,
    an agent that keeps services, its NICs with TX offload on, a client's CPU limits and address."""
    fake = FakeHost(host.spec, str(host.state_dir), str(host.code_dir), host.cgroup, host.env)
    shell(fake).reply("probe", probe_reply())
    services(fake)  # `down` asks every host to stop its services
    for ifname in host.spec.ports or (host.spec.interface,):
        fake.on("ethtool", "-k", ifname, answer=(0, "tx-checksumming: on\n"))
        fake.on("ethtool", "-K", ifname, "tx")
    if host.role.startswith("client"):
        healthy(fake).reply("grpc.ready", True).reply("tagless.ready", True)
        cgroups(fake)
        fake.on("ip", "-o", "-4", "addr", answer=(0, ""))  # its data-plane address is not there yet
        fake.on("ip", "addr")  # add and del
    return fake


def fake_ssh_lab(tmp_path, text: str = SSH_INVENTORY, clients: int = 1) -> SshLab:
    """An SshLab of the inventory `text` (its first `clients` client machines), its hosts fakes."""
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(text))
    lab = SshLab(load_inventory(path).with_clients(clients))
    lab.hosts = {role: fake_ssh_host(host) for role, host in lab.hosts.items()}
    appliance, server = lab.hosts["appliance"], lab.hosts["server"]
    appliance.reply("bridge.up", lambda **args: bridge_snapshot(args["bridge"], args["ports"]))
    appliance.reply("shape.apply", lambda link, up_if, down_if: [port_plan(up_if), port_plan(down_if)])
    appliance.reply("shape.clear", None).reply("bridge.down", None)
    # the server has its data-plane address already
    server.on("ip", "-o", "-4", "addr", answer=(0, "2: eth1    inet 10.77.0.2/24 brd ...\n"))
    return lab


@pytest.fixture
def ssh(tmp_path):
    """An SshLab of three fake machines (`fake_ssh_lab`)."""
    return fake_ssh_lab(tmp_path)


def test_ssh_up_records_what_it_did_and_down_undoes_exactly_that(ssh):
    client, appliance, server = (ssh.hosts[r] for r in ("client", "appliance", "server"))
    assert ssh.up() is True and ssh.is_up()
    assert appliance.verbs() == ["probe", "bridge.up", "shape.apply"]
    assert client.verbs() == ["probe", "cpu.apply", "grpc.ready", "tagless.ready"]
    (bridge,) = appliance.args("bridge.up")
    assert (bridge["own"], bridge["datapath"], bridge["ports"]) == (True, "netdev", ["eth1", "eth2"])
    assert client.ran("ip", "addr", "add") == [["ip", "addr", "add", "10.77.0.1/24", "dev", "eth1"]]
    assert server.ran("ip", "addr", "add") == []  # it was there before: not ours
    record = json.loads(client.files[str(client.state_dir / "up.json")])
    assert record == {
        "addresses": [["10.77.0.1/24", "eth1"]],
        "tx_offload_off": ["eth1"],
        "cgroup": "tbs-client",
    }

    removed = ssh.down()
    assert client.ran("ip", "addr", "del") == [["ip", "addr", "del", "10.77.0.1/24", "dev", "eth1"]]
    assert server.ran("ip", "addr", "del") == []
    assert client.ran("ethtool", "-K", "eth1", "tx", "on") and server.ran("ethtool", "-K", "eth1", "tx", "on")
    assert appliance.verbs()[-2:] == ["shape.clear", "bridge.down"]
    assert appliance.args("bridge.down") == [{"bridge": "tbs-br0", "rundir": ssh.rundir, "own": True}]
    assert "cpu.remove" in client.verbs()
    assert "server: offload service" in removed and "client: cgroup tbs-client" in removed


def test_ssh_bridge_joins_a_running_system_open_vswitch(ssh):
    ssh.hosts["appliance"].reply("probe", probe_reply(system_ovs=True, ovs_kernel_module=True))
    ssh.up()
    appliance = ssh.hosts["appliance"]
    (bridge,) = appliance.args("bridge.up")
    assert (bridge["own"], bridge["datapath"]) == (False, "system")
    assert ssh.switch_args()["own"] is False
    ssh.down()
    assert appliance.args("bridge.down")[0]["own"] is False  # the system's daemons are left running


def test_ssh_preflight_reports_every_host_and_takes_back_the_code(ssh):
    ssh.hosts["client"].on("id", "-u", answer=(1, "sudo: a password is required"))
    ssh.hosts["appliance"].reply("probe", probe_reply(python_modules={"ovs": False}))
    with pytest.raises(UserError) as exc:
        ssh.up()
    assert "client (fake client): cannot run commands" in exc.value.message
    assert "appliance (fake appliance): Python modules missing: ovs" in exc.value.message
    for host in ssh.hosts.values():
        assert host.ran("rm", "-rf", str(host.code_dir.parent))
    assert "bridge.up" not in ssh.hosts["appliance"].verbs()


def test_ssh_dry_run_plan_comes_from_the_appliance_even_when_down(ssh):
    appliance = ssh.hosts["appliance"]
    appliance.reply("shape.plan", lambda link, up_if, down_if: [port_plan(up_if, commands=["tc ..."])])
    plan = ssh.shape(ssh.inv.link, dry_run=True)
    assert [(port.ifname, port.commands) for port in plan] == [("eth2", ["tc ..."])]
    assert appliance.verbs() == ["shape.plan"]
    assert appliance.ran("python3", "-m", "tarfile", "-e")  # the agent was brought for the question
    assert appliance.ran("rm", "-rf", str(appliance.code_dir.parent))  # and taken away again


SSH_TWO_CLIENTS = SSH_INVENTORY.replace(
    "  - {role: appliance",
    "  - {role: client, name: phone, address: 10.77.0.3/24, interface: wlan0, ssh: {host: p.example.org}}\n"
    "  - {role: appliance",
)


def test_an_ssh_labs_client_machines_each_get_their_address_and_cpu_limit_and_down_undoes_each(tmp_path):
    """Issue 29 in an SSH lab: every client machine the inventory lists reaches the appliance's
    client-side port (through the lab's switch); `up --clients 2` configures both, each with a cgroup
    of its own name, and `down` undoes both, also when told of one client only."""
    lab = fake_ssh_lab(tmp_path, SSH_TWO_CLIENTS, clients=2)
    assert lab.client_roles == ("client", "client2") and lab.hosts["client2"].name == "phone"
    assert lab.up() is True
    client, phone = lab.hosts["client"], lab.hosts["client2"]
    assert phone.ran("ip", "addr", "add") == [["ip", "addr", "add", "10.77.0.3/24", "dev", "wlan0"]]
    assert [a["name"] for a in client.args("cpu.apply")] == ["tbs-client"]
    assert [a["name"] for a in phone.args("cpu.apply")] == ["tbs-client2"]
    assert json.loads(phone.files[str(phone.state_dir / "up.json")])["cgroup"] == "tbs-client2"
    (bridge,) = lab.hosts["appliance"].args("bridge.up")
    assert bridge["ports"] == ["eth1", "eth2"]  # one port faces every client, through the switch

    assert (
        json.loads(lab.hosts["appliance"].files[str(lab.hosts["appliance"].state_dir / "up.json")])["clients"]
        == 2
    )
    assert lab.up() is False  # up already, as asked
    assert SshLab(lab.inv.with_clients(1)).find_host("phone").spec.name == "phone"  # `exec phone -- ...`
    told_one = SshLab(lab.inv.with_clients(1))  # `testbed down` without --clients
    told_one.hosts = lab.hosts | {}
    del told_one.hosts["client2"]
    reached = []
    told_one._ssh_host = lambda role: reached.append(role) or phone
    removed = told_one.down()
    assert reached == ["client2"]  # the listed machine the command was not told of
    assert phone.ran("ip", "addr", "del") == [["ip", "addr", "del", "10.77.0.3/24", "dev", "wlan0"]]
    assert "phone: cgroup tbs-client2" in removed and "client: cgroup tbs-client" in removed


def test_an_ssh_lab_has_as_many_clients_as_its_inventory_lists(tmp_path):
    lab = fake_ssh_lab(tmp_path, SSH_TWO_CLIENTS)
    assert lab.inv.listed_clients == ("client", "client2") and lab.client_roles == ("client",)
    with pytest.raises(UserError, match="lists 2 client host"):
        lab.inv.with_clients(3)
    assert lab.up() is True
    lab.inv = lab.inv.with_clients(2)  # a sweep of two clients on the lab up with one
    with pytest.raises(UserError, match="up with 1 client machine"):
        lab.up()


class Unreachable:
    """A listed client machine that does not answer."""

    name = "phone"
    state_dir = code_dir = PurePosixPath("/run/testbed/tbs/phone")

    def read(self, path):
        raise UserError("phone (root@p.example.org:22): cannot connect", "check the machine")

    run = agent = read

    def close(self):
        pass


def test_down_only_tries_a_listed_client_machine_that_up_did_not_use(tmp_path):
    lab = fake_ssh_lab(tmp_path, SSH_TWO_CLIENTS)  # up with the first client only
    assert lab.up() is True
    lab._ssh_host = lambda role: Unreachable()
    removed = lab.down()  # the phone is off: nothing of ours can be on it
    assert "client: cgroup tbs-client" in removed
    lab = fake_ssh_lab(tmp_path, SSH_TWO_CLIENTS, clients=2)
    assert lab.up() is True
    lab.hosts["client2"] = Unreachable()  # up used it: it must be reached
    with pytest.raises(UserError, match="could not reach every host: phone"):
        lab.down()
