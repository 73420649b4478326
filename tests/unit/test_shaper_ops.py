"""The dry run is what the host applies: `Shaper.plan` lists the tc operations from the plan and the
ports' state, and `Shaper.apply` sends exactly those netlink requests, checked against a recording
netlink double that holds the ports' qdiscs and classes as the kernel would."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest

from agent import verbs
from appliance.shaper import Shaper, plan_shaping
from appliance.tc_ops import CLASS_ID, ROOT_ID, PortState, port_ops
from contracts.agent_api import ShapeApply, ShapePlan
from contracts.errors import UserError
from contracts.profiles import LinkSpec
from contracts.units import parse_rate
from testbed import cli
from testbed.backends.netns import NetnsLab
from testbed.cli import link as link_cli
from testbed.inventory import load_inventory
from tests.fakes import FakeHost

REPO = Path(__file__).resolve().parents[2]

NETEM_ID = 0x100000  # 10:
HZ = 250


class Msg(dict):
    """A netlink message as pyroute2 gives it: fields by key, attributes by `get_attr`."""

    def __init__(self, kind: str, handle: int, parent: int) -> None:
        super().__init__(handle=handle, parent=parent)
        self.kind = kind

    def get_attr(self, name: str):
        if name != "TCA_KIND":
            raise KeyError(f"the double has no attribute {name}")
        return self.kind


class Kernel:
    """IPRoute's shaping calls on scripted ports. Every `tc` request is recorded and changes the
    state as the kernel would; a request the kernel would refuse (a class changed that is not there,
    a netem deleted that is not there, a port that does not exist) raises, as does any other call."""

    def __init__(self, **ports: dict) -> None:
        self.index = {name: i for i, name in enumerate(["lo", *ports], start=1)}
        self.qdiscs = {name: list(spec.get("qdiscs", ())) for name, spec in ports.items()}
        self.classes = {name: list(spec.get("classes", ())) for name, spec in ports.items()}
        self.netem_module = True
        self.calls: list[tuple] = []

    # a context manager, as IPRoute is; `Shaper(connect=kernel)` opens it
    def __call__(self) -> Kernel:
        return self

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def link_lookup(self, ifname: str) -> list[int]:
        return [self.index[ifname]] if ifname in self.index else []

    def _name(self, index: int) -> str:
        return next(name for name, i in self.index.items() if i == index)

    def get_qdiscs(self, index: int) -> list[Msg]:
        return list(self.qdiscs[self._name(index)])

    def get_classes(self, index: int) -> list[Msg]:
        return list(self.classes[self._name(index)])

    def tc(self, command: str, kind: str | None = None, index: int | None = None, **kw) -> None:
        self.calls.append((command, kind, self._name(index), kw))
        name = self._name(index)
        if name == "lo":  # the netem probe: add then delete, on the loopback
            if command == "add" and not self.netem_module:
                raise _netlink_error(2)
            return
        qdiscs, classes = self.qdiscs[name], self.classes[name]
        if (command, kind) == ("replace", "htb") and "parent" not in kw:
            assert kw == {"handle": "1:", "default": 0x10}
            qdiscs[:] = [Msg("htb", ROOT_ID, 0xFFFFFFFF)]  # the old root goes with its children
            classes.clear()
        elif (command, kind) == ("add-class", "htb"):
            assert not any(c["handle"] == CLASS_ID for c in classes), "EEXIST"
            classes.append(Msg("htb", CLASS_ID, ROOT_ID))
        elif (command, kind) == ("change-class", "htb"):
            assert any(c["handle"] == CLASS_ID for c in classes), "ENOENT"
        elif (command, kind) == ("replace", "netem"):
            assert kw["parent"] == "1:10" and any(c["handle"] == CLASS_ID for c in classes)
            qdiscs[:] = [q for q in qdiscs if q["parent"] != CLASS_ID] + [Msg("netem", NETEM_ID, CLASS_ID)]
        elif (command, kind) == ("del", "netem"):
            assert any(q["parent"] == CLASS_ID for q in qdiscs), "ENOENT"
            qdiscs[:] = [q for q in qdiscs if q["parent"] != CLASS_ID]
        else:
            raise AssertionError(f"unscripted tc request {command} {kind} {kw}")

    def port_calls(self) -> list[tuple]:
        return [c for c in self.calls if c[2] != "lo"]


def _netlink_error(code: int):
    from pyroute2.netlink.exceptions import NetlinkError

    return NetlinkError(code)


FRESH_PORT = {"qdiscs": [Msg("noqueue", 0, 0xFFFFFFFF)]}
SHAPED = {"qdiscs": [Msg("htb", ROOT_ID, 0xFFFFFFFF)], "classes": [Msg("htb", CLASS_ID, ROOT_ID)]}
WITH_NETEM = {
    "qdiscs": [Msg("htb", ROOT_ID, 0xFFFFFFFF), Msg("netem", NETEM_ID, CLASS_ID)],
    "classes": [Msg("htb", CLASS_ID, ROOT_ID)],
}
HTB_WITHOUT_CLASS = {"qdiscs": [Msg("htb", ROOT_ID, 0xFFFFFFFF)]}


def tc_to_call(command: str) -> tuple:
    """Read a printed `tc` command back as the netlink request it stands for (tc's own syntax and
    units: rates through the CLI's rate parser, bursts in bytes, delay in ms, loss in %)."""
    words = command.split()
    assert words[0] == "tc"
    action = {
        ("qdisc", "replace"): "replace",
        ("qdisc", "del"): "del",
        ("class", "add"): "add-class",
        ("class", "change"): "change-class",
    }[(words[1], words[2])]
    rest = words[3:]
    assert rest[0] == "dev"
    ifname, rest = rest[1], rest[2:]
    kw: dict = {}
    if rest[0] == "root":
        rest = rest[1:]
    else:
        assert rest[0] == "parent"
        kw["parent"], rest = rest[1], rest[2:]
    assert rest[0] == ("classid" if words[1] == "class" else "handle")
    kw["handle"], kind, rest = rest[1], rest[2], rest[3:]
    assert len(rest) % 2 == 0, command
    for key, value in zip(rest[::2], rest[1::2], strict=True):
        if key in ("rate", "ceil"):
            kw[key] = f"{parse_rate(value)}bit"
        elif key in ("burst", "cburst"):
            assert value.endswith("b")
            kw[key] = int(value[:-1])
        elif key == "default":
            kw[key] = int(value, 16)
        elif key == "delay":
            assert value.endswith("ms")
            kw[key] = round(float(value[:-2]) * 1000)
        elif key == "loss":
            assert value.endswith("%")
            kw[key] = float(value[:-1])
        else:
            kw[key] = int(value)
    return (action, kind, ifname, kw)


def printed_and_applied(kernel: Kernel, link: LinkSpec) -> tuple[list[str], list[tuple]]:
    """What the dry run prints now, and the netlink requests `apply` then sends to the ports."""
    shaper = Shaper(connect=kernel)
    ports = plan_shaping(link, "a1", "a0", hz=HZ)
    printed = [op.tc() for op in shaper.plan(ports)]
    kernel.calls.clear()
    executed = shaper.apply(ports)
    assert [op.tc() for op in executed] == printed
    return printed, kernel.port_calls()


LINK = LinkSpec(20_000_000, 10_000_000)
HTB_UP = "htb rate 20mbit ceil 20mbit burst 11514b cburst 11514b quantum 200000"
HTB_DOWN = "htb rate 10mbit ceil 10mbit burst 6514b cburst 6514b quantum 125000"


def test_a_fresh_port_gets_a_root_htb_and_its_class():
    kernel = Kernel(a1=FRESH_PORT, a0=FRESH_PORT)
    printed, applied = printed_and_applied(kernel, LINK)
    assert printed == [
        "tc qdisc replace dev a1 root handle 1: htb default 10",
        f"tc class add dev a1 parent 1: classid 1:10 {HTB_UP}",
        "tc qdisc replace dev a0 root handle 1: htb default 10",
        f"tc class add dev a0 parent 1: classid 1:10 {HTB_DOWN}",
    ]
    assert applied == [tc_to_call(c) for c in printed]
    assert applied[1] == (
        "add-class",
        "htb",
        "a1",
        {
            "handle": "1:10",
            "parent": "1:",
            "rate": "20000000bit",
            "ceil": "20000000bit",
            "burst": 11514,
            "cburst": 11514,
            "quantum": 200000,
        },
    )


def test_a_rate_change_on_an_existing_htb_is_one_class_change_per_port():
    kernel = Kernel(a1=SHAPED, a0=SHAPED)
    printed, applied = printed_and_applied(kernel, LINK)
    assert printed == [
        f"tc class change dev a1 parent 1: classid 1:10 {HTB_UP}",
        f"tc class change dev a0 parent 1: classid 1:10 {HTB_DOWN}",
    ]
    assert applied == [tc_to_call(c) for c in printed]


def test_netem_present_and_not_asked_for_is_deleted():
    kernel = Kernel(a1=WITH_NETEM, a0=SHAPED)
    printed, applied = printed_and_applied(kernel, LINK)
    assert printed == [
        f"tc class change dev a1 parent 1: classid 1:10 {HTB_UP}",
        "tc qdisc del dev a1 parent 1:10 handle 10: netem",
        f"tc class change dev a0 parent 1: classid 1:10 {HTB_DOWN}",
    ]
    assert applied == [tc_to_call(c) for c in printed]
    assert not any(q.kind == "netem" for q in kernel.qdiscs["a1"])


def test_netem_absent_and_asked_for_is_added_after_the_probe_and_present_is_replaced():
    link = LinkSpec(20_000_000, 10_000_000, delay_ms=25.0, loss_pct=0.5)
    kernel = Kernel(a1=SHAPED, a0=WITH_NETEM)
    printed, applied = printed_and_applied(kernel, link)
    assert printed == [
        f"tc class change dev a1 parent 1: classid 1:10 {HTB_UP}",
        "tc qdisc replace dev a1 parent 1:10 handle 10: netem delay 25ms loss 0.5% limit 1000",
        f"tc class change dev a0 parent 1: classid 1:10 {HTB_DOWN}",
        "tc qdisc replace dev a0 parent 1:10 handle 10: netem delay 25ms loss 0.5% limit 1000",
    ]
    assert applied == [tc_to_call(c) for c in printed]
    assert applied[1][3]["delay"] == 25_000  # pyroute2 takes microseconds
    # the only other requests: the netem probe on the loopback, added and deleted before any port
    assert [c[:3] for c in kernel.calls[:2]] == [("add", "netem", "lo"), ("del", None, "lo")]
    assert kernel.calls[2:] == applied


def test_after_apply_the_same_link_is_planned_as_an_in_place_change():
    link = LinkSpec(20_000_000, 10_000_000, delay_ms=25.0)
    kernel = Kernel(a1=FRESH_PORT, a0=HTB_WITHOUT_CLASS)
    printed, _ = printed_and_applied(kernel, link)
    assert [c.split(" dev ")[0] for c in printed] == [
        "tc qdisc replace",
        "tc class add",
        "tc qdisc replace",
        "tc class add",  # an HTB root without our class keeps its qdisc
        "tc qdisc replace",
    ]
    again = [op.tc() for op in Shaper(connect=kernel).plan(plan_shaping(link, "a1", "a0", hz=HZ))]
    assert [c.split(" dev ")[0] for c in again] == ["tc class change", "tc qdisc replace"] * 2


def test_replacing_the_root_takes_netem_with_it_so_none_is_deleted():
    state = PortState(exists=True, htb=False, htb_class=False, netem=True)
    (port, _) = plan_shaping(LINK, "a1", "a0", hz=HZ)
    assert [op.action for op in port_ops(port, state)] == ["replace", "add-class"]


def test_a_missing_port_is_planned_fresh_but_not_applied():
    kernel = Kernel(a0=SHAPED)
    shaper = Shaper(connect=kernel)
    ports = plan_shaping(LINK, "a1", "a0", hz=HZ)
    assert [op.tc().split(" dev ")[0] for op in shaper.plan(ports)][:2] == [
        "tc qdisc replace",
        "tc class add",
    ]
    with pytest.raises(UserError, match="appliance port a1 does not exist"):
        shaper.apply(ports)
    assert kernel.calls == []


def test_without_sch_netem_nothing_is_changed():
    kernel = Kernel(a1=SHAPED, a0=SHAPED)
    kernel.netem_module = False
    with pytest.raises(UserError, match="sch_netem"):
        Shaper(connect=kernel).apply(plan_shaping(LinkSpec(10**7, 10**7, loss_pct=1.0), "a1", "a0", hz=HZ))
    assert kernel.port_calls() == []


def test_rates_print_exactly():
    kernel = Kernel(a1=SHAPED, a0=SHAPED)
    printed, applied = printed_and_applied(kernel, LinkSpec(12_345_678, 1_500_000))
    assert "rate 12345678bit ceil 12345678bit" in printed[0]
    assert "rate 1500kbit ceil 1500kbit" in printed[1]
    assert applied == [tc_to_call(c) for c in printed]


# ------------------------------------------------------------------ the agent's verbs
def test_the_agents_plan_answer_is_what_its_apply_executes(monkeypatch):
    kernel = Kernel(**{"tb-a1": WITH_NETEM, "tb-a0": FRESH_PORT})
    monkeypatch.setattr(verbs, "_shaper", lambda: Shaper(connect=kernel))
    args = {"link": LinkSpec(30_000_000, 40_000_000), "up_if": "tb-a1", "down_if": "tb-a0"}
    planned = verbs.shape_plan(ShapePlan(**args))
    assert [p.exists for p in planned] == [True, True]
    commands = [c for port in planned for c in port.commands]
    assert [c.split(" dev ")[0] for c in commands] == [
        "tc class change",
        "tc qdisc del",
        "tc qdisc replace",
        "tc class add",
    ]
    kernel.calls.clear()
    applied = verbs.shape_apply(ShapeApply(**args))
    assert [c for port in applied for c in port.commands] == commands
    assert kernel.port_calls() == [tc_to_call(c) for c in commands]
    assert applied[0].ops[0].params["rate"] == 30_000_000


def test_the_agents_plan_for_a_port_that_is_not_there_says_so(monkeypatch):
    kernel = Kernel(**{"tb-a0": SHAPED})
    monkeypatch.setattr(verbs, "_shaper", lambda: Shaper(connect=kernel))
    up, down = verbs.shape_plan(ShapePlan(link=LinkSpec(10**7, 10**7), up_if="tb-a1", down_if="tb-a0"))
    assert (up.exists, down.exists) == (False, True)
    assert up.commands[0] == "tc qdisc replace dev tb-a1 root handle 1: htb default 10"
    assert kernel.calls == []


# ------------------------------------------------------------------ the CLI's dry run
def the_agents(request_type):
    """A fake host's script that is the agent's own verb (a script takes the request's fields)."""
    return lambda **fields: verbs.VERBS[request_type.VERB](request_type(**fields))


def test_shape_dry_run_prints_what_shape_then_applies(monkeypatch, capsys):
    """`testbed shape --dry-run` through the lab and the appliance's agent verbs (on a fake host over
    the kernel double): each printed line is one request that `testbed shape` then sends."""
    inventory = REPO / "inventory.yaml"
    lab = NetnsLab(load_inventory(inventory))
    appliance = FakeHost(lab.hosts["appliance"].spec)
    lab.hosts["appliance"] = appliance.reply("shape.plan", the_agents(ShapePlan)).reply(
        "shape.apply", the_agents(ShapeApply)
    )
    kernel = Kernel(**{lab.up_if: SHAPED, lab.down_if: WITH_NETEM})
    monkeypatch.setattr(verbs, "_shaper", lambda: Shaper(connect=kernel))
    monkeypatch.setattr(link_cli, "open_lab", lambda inv: lab)

    assert cli.main(["--inventory", str(inventory), "shape", "--rate", "30", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    prefix = f"on {appliance.where}: "
    assert lines and all(line.startswith(prefix) for line in lines)
    printed = [line.removeprefix(prefix) for line in lines]
    assert [c.split(" dev ")[0] for c in printed] == ["tc class change", "tc class change", "tc qdisc del"]
    assert kernel.calls == []  # a dry run changes nothing

    lab.shape(replace(lab.inv.link, up_rate=30_000_000, down_rate=30_000_000))
    assert kernel.port_calls() == [tc_to_call(c) for c in printed]


def test_shape_dry_run_says_when_a_port_is_not_there(monkeypatch, capsys):
    inventory = REPO / "inventory.yaml"
    lab = NetnsLab(load_inventory(inventory))
    appliance = FakeHost(lab.hosts["appliance"].spec)
    lab.hosts["appliance"] = appliance.reply("shape.plan", the_agents(ShapePlan))
    monkeypatch.setattr(verbs, "_shaper", lambda: Shaper(connect=Kernel()))
    monkeypatch.setattr(link_cli, "open_lab", lambda inv: lab)

    assert cli.main(["--inventory", str(inventory), "shape", "--rate", "30", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"# {lab.up_if} does not exist on {appliance.where} (testbed down)" in out
    assert f"on {appliance.where}: tc qdisc replace dev {lab.up_if} root handle 1: htb default 10" in out


def test_the_agents_shaper_resolves_its_own_ports_without_netlink():
    """In the agent's own namespace a port's index is the kernel's `if_nametoindex` (no request: the
    sweep reads the classes after every trial); a port that is not there reads as absent."""
    local = Shaper(connect=Kernel(), local=True)
    assert local._lookup(None, "lo") == socket.if_nametoindex("lo")
    assert local._lookup(None, "tbz-no-such-port") is None
    assert Shaper(connect=Kernel(a1=SHAPED))._lookup(Kernel(a1=SHAPED), "a1") == 2  # elsewhere: netlink
