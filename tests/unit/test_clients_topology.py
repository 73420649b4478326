"""Several client hosts on one embedded testbed (`testbed up --clients N`), without root: their names
and addresses, the wiring plan with the trunk between the appliance's two bridges, and up, status and
down through fake hosts (every client's host, interface and CPU limit; one shared shaped port each way)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from appliance.switch import Switch
from contracts.errors import UserError
from testbed.backends import topology
from testbed.backends.topology import Names
from testbed.inventory import MAX_CLIENTS
from tests.unit.conftest import fake_netns_lab


@pytest.fixture
def three(fake_inventory, tmp_path, monkeypatch):
    """The fake embedded testbed with three clients."""
    return fake_netns_lab(fake_inventory.with_clients(3), tmp_path / "state", monkeypatch, {})


def test_each_further_client_is_the_first_renamed_at_the_next_free_address(fake_inventory):
    inv = fake_inventory.with_clients(3)
    assert inv.client_roles == ("client", "client2", "client3")
    first, server = inv.host("client"), inv.host("server")
    second, third = inv.host("client2"), inv.host("client3")
    assert (second.name, third.name) == (f"{first.name}2", f"{first.name}3")
    addresses = {first.address, server.address, second.address, third.address}
    assert len(addresses) == 4 and {a.network for a in addresses} == {first.address.network}
    assert fake_inventory.client_roles == ("client",)


@pytest.mark.parametrize(
    "change, n, words",
    [
        ({}, 0, "1 to"),
        ({}, MAX_CLIENTS + 1, "1 to"),
        ({"backend": "ssh"}, 2, "lists 1 client host"),  # an SSH lab: the client machines it lists
    ],
)
def test_a_number_of_clients_the_testbed_cannot_have_is_refused_in_one_line(fake_inventory, change, n, words):
    with pytest.raises(UserError, match=words):
        replace(fake_inventory, **change).with_clients(n)


def test_clients_that_do_not_fit_in_the_subnet_are_refused(fake_inventory):
    import ipaddress

    hosts = dict(fake_inventory.hosts)
    hosts["client"] = replace(hosts["client"], address=ipaddress.IPv4Interface("10.9.0.1/29"))
    hosts["server"] = replace(hosts["server"], address=ipaddress.IPv4Interface("10.9.0.2/29"))
    small = replace(fake_inventory, hosts=hosts)
    assert small.with_clients(5).host("client5").address.ip == ipaddress.IPv4Address("10.9.0.6")
    with pytest.raises(UserError, match="do not fit in 10.9.0.0/29"):
        small.with_clients(6)


def test_a_further_clients_name_taken_by_another_host_is_refused(fake_inventory):
    hosts = dict(fake_inventory.hosts)
    hosts["server"] = replace(hosts["server"], name=f"{hosts['client'].name}2")
    with pytest.raises(UserError, match="already another host's"):
        replace(fake_inventory, hosts=hosts).with_clients(2)


def test_one_client_keeps_the_wiring_of_a_three_host_testbed(fake_inventory):
    names = Names.of(fake_inventory)
    assert names.namespaces == (names.client_ns, names.appliance_ns, names.server_ns)
    assert names.bridges == {names.bridge: [names.to_client, names.to_server]}
    assert names.down_port == names.to_client and names.trunk == ("", "")
    veths = [str(s) for s in topology.plan(fake_inventory) if s.kind == "veth"]
    assert len(veths) == 2


def test_several_clients_share_one_port_each_way_through_a_trunk_between_two_bridges(fake_inventory):
    inv = fake_inventory.with_clients(3)
    names = Names.of(inv)
    p = inv.prefix
    assert [c.port for c in names.clients] == [f"{p}-a0", f"{p}-ac1", f"{p}-ac2"]
    assert names.bridges == {
        f"{p}-br0": [f"{p}-a0", f"{p}-ac1", f"{p}-ac2", f"{p}-t0"],
        f"{p}-br1": [f"{p}-t1", f"{p}-a1"],
    }
    assert names.down_port == f"{p}-t1"  # server->client traffic leaves the server's bridge here
    steps = topology.plan(inv)
    assert [s.ns for s in steps if s.kind == "netns"] == list(names.namespaces)
    assert len(names.namespaces) == 5
    veths = [str(s) for s in steps if s.kind == "veth"]
    assert (
        f"ip link add {p}-t0 netns {names.appliance_ns} type veth peer name {p}-t1 netns {names.appliance_ns}"
        in veths
    )
    assert (
        f"ip link add {p}-c2 netns {names.clients[2].ns} type veth peer name {p}-ac2 netns {names.appliance_ns}"
        in veths
    )
    addrs = {s.ns: s.address for s in steps if s.kind == "addr"}
    assert addrs[names.clients[2].ns] == str(inv.host("client3").address)
    up = [(s.ns, s.ifname) for s in steps if s.kind == "up" and s.ifname != "lo"]
    assert sorted(up) == sorted(topology.ports(names)) and len(up) == 3 + 4 + 2 + 1
    assert all(len(ifname) <= 15 for _, ifname in up)


def test_down_looks_for_as_many_clients_as_a_testbed_can_have(fake_inventory):
    everything = Names.of(fake_inventory, clients=MAX_CLIENTS)
    assert len(everything.clients) == MAX_CLIENTS
    assert all(len(name) <= 15 for name in everything.links)
    assert len(set(everything.namespaces)) == MAX_CLIENTS + 2


def test_the_switch_plans_every_bridge_in_one_database_and_removes_each():
    switch = Switch("x-br0", ("x-a0", "x-t0"), Path("/run/x/ovs"), more=(("x-br1", ("x-t1", "x-a1")),))
    bridges = [argv for argv in switch.plan_up() if "add-br" in argv]
    assert [argv[argv.index("add-br") + 1] for argv in bridges] == ["x-br0", "x-br1"]
    ports = [argv[i + 2] for argv in bridges for i, a in enumerate(argv) if a == "add-port"]
    assert ports == ["x-a0", "x-t0", "x-t1", "x-a1"]
    assert sum(argv[0] == "ovsdb-tool" for argv in switch.plan_up()) == 1  # one database for both
    removed = [argv[-1] for argv in switch.plan_down() if "del-br" in argv]
    assert removed == ["x-br0", "x-br1"]


def test_up_with_three_clients_limits_wires_and_shapes_each(three):
    assert three.up() is True
    p = three.inv.prefix
    appliance = three.hosts["appliance"]
    (bridge,) = appliance.args("bridge.up")
    assert bridge["ports"] == [f"{p}-a0", f"{p}-ac1", f"{p}-ac2", f"{p}-t0"]
    assert bridge["more"] == [[f"{p}-br1", [f"{p}-t1", f"{p}-a1"]]]
    (shape,) = appliance.args("shape.apply")
    assert (shape["up_if"], shape["down_if"]) == (f"{p}-a1", f"{p}-t1")
    for k, role in enumerate(("client", "client2", "client3")):
        host = three.hosts[role]
        assert host.ran("ethtool") == [["ethtool", "-K", f"{p}-c{k}", "tx", "off"]]
        assert host.args("cpu.apply") == [{"name": three.names.clients[k].cgroup, "quota": 0.25}]
    assert len(appliance.ran("ethtool")) == 6
    assert three.running_clients() == 3


def test_status_lists_every_client_and_both_bridges(three):
    three.up()
    three.hosts["server"].reply("service.status", 42)
    status = three.status()
    assert list(status["hosts"]) == ["client", "client2", "client3", "appliance", "server"]
    assert status["hosts"]["client3"]["address"] == str(three.inv.host("client3").address)
    assert [b["name"] for b in status["bridges"]] == [three.names.server_bridge]
    assert status["shaping"]["down (server->client)"]["port"] == three.names.down_port


def test_a_command_after_up_acts_on_the_clients_that_are_up(three, fake_inventory, tmp_path, monkeypatch):
    three.up()
    later = fake_netns_lab(fake_inventory, three.state_dir, monkeypatch, three.wiring)
    assert later.inv.clients == 3 and later.down_if == three.down_if
    assert later.up() is False  # already up
    with pytest.raises(UserError, match="up with 3 client"):
        fake_netns_lab(fake_inventory.with_clients(2), three.state_dir, monkeypatch, three.wiring).up()


def test_down_with_the_plain_inventory_removes_every_client(three, fake_inventory, monkeypatch):
    three.up()
    (three.state_dir / "up.json").unlink()  # a crash: nothing says how many clients were up
    plain = fake_netns_lab(fake_inventory, three.state_dir, monkeypatch, three.wiring)
    assert plain.inv.clients == 1
    limits = ["tbf-client", "tbf-client2", "tbf-client3"]
    plain.hosts["client"].reply("cpu.remove", lambda name: name in limits and not limits.remove(name))
    removed = plain.down()
    assert sorted(r for r in removed if r.startswith("netns")) == sorted(
        f"netns {n}" for n in three.names.namespaces
    )
    assert {"cgroup tbf-client", "cgroup tbf-client2", "cgroup tbf-client3"} <= set(removed)
    assert three.wiring["namespaces"] == [] and not json.dumps(removed).count("client4")
