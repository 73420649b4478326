"""Fixtures shared by the unit tests (no root): the fake embedded testbed, and the check that no test's
code asked a fake host for something nobody scripted."""

from __future__ import annotations

import importlib.util
import itertools
import signal
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from contracts.agent_answers import ApplianceReading, BridgeSnapshot, HtbClass, PortPlan
from contracts.command import Result
from contracts.errors import UserError
from contracts.profiles import LinkSpec
from testbed.backends import netns as lab_mod
from testbed.backends.netns import NetnsLab
from testbed.inventory import load_inventory
from testbed.sweep.bookkeeping import start_run
from tests.fake_answers import bridge_snapshot, htb_class, port_plan
from tests.fakes import (
    FAKE_SWEEP,
    UNSCRIPTED,
    FakeHost,
    cgroups,
    healthy,
    healthy_worker,
    link,
    offloads_off,
    probe_reply,
    services,
)
from tests.isolation import Lease, write_inventory

# the fake testbed's identity: nothing is made on the machine, so it needs no lease of its own
FAKE_LEASE = Lease("tbf", ("10.78.0",), (18080, 15201, 50051))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.call_failed = report.failed  # a failed test has said what went wrong already
    return report


@pytest.fixture(autouse=True)
def ctrl_c_is_keyboard_interrupt():
    """Ctrl-C as a terminal delivers it, whatever started the tests: a shell's background job (`cmd &`,
    `nohup`) starts with SIGINT ignored, and Python then installs no handler, so a fake worker's
    simulated Ctrl-C would be lost and its sweep wait for an answer forever."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(autouse=True)
def nothing_unscripted(request):
    """Fail a test whose code asked a fake host for something unscripted, even if it swallowed the error."""
    yield
    asked = [str(exc) for exc in UNSCRIPTED]
    UNSCRIPTED.clear()
    if not getattr(request.node, "call_failed", False):
        assert not asked, "asked of a fake host and not scripted:\n" + "\n".join(asked)


class FakeShaping:
    """The appliance's HTB classes as the agent reports them: at the rate last applied, each reading's
    byte counters ahead of the last by more than any trial moves (`broken` ports have no class)."""

    def __init__(self) -> None:
        self.rates: dict[str, int] = {}
        self.sent = itertools.count(step=10**9)
        self.broken: set[str] = set()

    def apply(self, link: LinkSpec, up_if: str, down_if: str) -> list[PortPlan]:
        self.rates = {up_if: link.up_rate, down_if: link.down_rate}
        self.broken.clear()
        return [port_plan(i) for i in (up_if, down_if)]

    def classes(self, ifs: tuple[str, ...]) -> dict[str, HtbClass]:
        sent = next(self.sent)
        return {i: htb_class(self.rates[i], sent) for i in ifs if i not in self.broken}


class FakeSwitch:
    """The appliance's Open vSwitch as its agent reports it: `problems` until restarted (a restart
    comes back without our qdiscs, as one may), or for good while `unrepairable`."""

    def __init__(self, shaping: FakeShaping) -> None:
        self.shaping = shaping
        self.problems: list[str] = []
        self.unrepairable: str | None = None
        self.restarts = 0

    def check(self, ifs: tuple[str, ...], bridge: str, rundir: str, own: bool) -> ApplianceReading:
        return ApplianceReading(classes=self.shaping.classes(ifs), switch=list(self.problems))

    def health(self, bridge: str, rundir: str, ports: list[str], own: bool, more=()) -> list[str]:
        return list(self.problems)

    def restart(
        self, bridge: str, ports: tuple, rundir: str, datapath: str, own: bool, more=()
    ) -> BridgeSnapshot:
        self.restarts += 1
        if self.unrepairable:
            raise UserError(self.unrepairable)
        self.problems = []
        self.shaping.broken = {*ports, *(p for _, each in more for p in each)}
        return bridge_snapshot(bridge, sorted(ports), datapath)


def fake_netns_lab(inv, state_dir, monkeypatch, wiring: dict) -> NetnsLab:
    """A NetnsLab of `inv` whose hosts are fakes scripted for up, status and down (their agents keep
    services and CPU limits as the real ones do), and whose wiring (pyroute2, ip) is recorded in
    `wiring`, not applied; several such labs can share one `wiring` (replicas)."""
    lab = NetnsLab(inv, state_dir)
    for role, host in list(lab.hosts.items()):
        fake = FakeHost(host.spec, str(lab.state_dir), cgroup=host.cgroup, env=host.env)
        lab.hosts[role] = fake.reply("probe", probe_reply())
    client, appliance, server = (lab.hosts[r] for r in ("client", "appliance", "server"))
    names = lab.names
    for c in names.clients:  # several clients: each its own host, interface and CPU limit
        offloads_off(lab.hosts[c.role], c.ifname)
        if c.role != "client":
            cgroups(lab.hosts[c.role])
    offloads_off(server, names.server_if)
    offloads_off(appliance, *(port for ports in names.bridges.values() for port in ports))
    healthy(client).reply("grpc.ready", True).reply(
        "tagless.ready", True
    )  # its gRPC and tagless ports answer
    lab.cpu_limits = cgroups(client)
    lab.services = services(server)
    shaping = lab.shaping = FakeShaping()

    def bridge(**args) -> BridgeSnapshot:
        name = args.get("bridge", names.bridge)
        return bridge_snapshot(name, names.bridges[name])

    appliance.reply("bridge.up", bridge).reply("bridge.status", bridge)
    appliance.reply("shape.apply", shaping.apply).reply("shape.classes", shaping.classes)
    switch = lab.switch = FakeSwitch(shaping)
    appliance.reply("appliance.check", switch.check).reply("bridge.health", switch.health)
    appliance.reply("bridge.restart", switch.restart)
    appliance.reply("shape.read", lambda ifs: {i: {} for i in ifs})
    wiring.setdefault("namespaces", [])
    wiring.setdefault("applied", [])
    wiring.setdefault("commands", [])
    wiring.setdefault("labs", []).append(lab)
    monkeypatch.setattr(lab_mod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(
        lab_mod.topology,
        "existing_namespaces",
        lambda names: [ns for ns in wiring["namespaces"] if ns in names.namespaces],
    )

    def apply(steps):
        wiring["applied"] += steps
        named = {getattr(step, "ns", None) for step in steps}
        for each in wiring["labs"]:
            if named & set(each.names.namespaces):
                wiring["namespaces"] += [ns for ns in each.names.namespaces if ns not in wiring["namespaces"]]

    monkeypatch.setattr(lab_mod.topology, "apply", apply)
    monkeypatch.setattr(lab_mod.topology, "remove_root_leftovers", lambda names: [])
    monkeypatch.setattr(lab_mod, "_netns_pids", lambda ns: [])

    def run(argv, **kwargs):
        wiring["commands"].append(list(argv))
        if argv[:3] == ["ip", "netns", "delete"]:
            wiring["namespaces"].remove(argv[3])
        if argv[0] == "modprobe":  # this machine's kernel: no openvswitch module unless a test gives one
            return Result("local", list(argv), 0 if wiring.get("ovs_module") else 1, "", "")
        return None

    monkeypatch.setattr(lab_mod, "run", run)
    monkeypatch.setattr(lab_mod, "OVS_MODULE_MARK", state_dir.parent / "openvswitch-loaded-by-testbed")
    lab.wiring = wiring
    return lab


@pytest.fixture
def fake_inventory(tmp_path):
    """The unit tests' inventory (prefix tbf, a client CPU quota of 0.25)."""
    return load_inventory(write_inventory(tmp_path / "inventory.yaml", FAKE_LEASE, quota=0.25))


@pytest.fixture
def netns(fake_inventory, tmp_path, monkeypatch):
    """The fake embedded testbed (`fake_netns_lab`) of the unit tests' inventory."""
    return fake_netns_lab(fake_inventory, tmp_path / "state", monkeypatch, {})


@pytest.fixture
def two_testbeds(fake_inventory, tmp_path, monkeypatch):
    """Two fake replicas of the unit tests' testbed, ready for sweeps, sharing their recorded wiring.
    Laid out as on a host: each one's state in a state root of their own (`tmp_path / "testbed"`, the
    fakes' /run/testbed), the host-wide lock beside them (where a test may open it)."""
    from testbed.backends.replicas import replica_inventories

    wiring: dict = {}
    root = tmp_path / "testbed"
    lock = str(root / "cpu.lock")
    return [
        sweep_ready(fake_netns_lab(replace(inv, cpu_lock=lock), root / inv.prefix, monkeypatch, wiring))
        for inv in replica_inventories(fake_inventory, 2)
    ]


def sweep_ready(lab: NetnsLab) -> NetnsLab:
    """A fake testbed ready for sweeps: a healthy worker, a link that validates, the appliance's counters."""
    link(lab)
    lab.hosts["client"].worker(healthy_worker)
    ticks = itertools.count()

    def counters(ifs, bridge, rundir, own):
        n = next(ticks)
        return {"at": n, "htb": {i: htb_class(10**7, 1000 * n) for i in ifs}, "ovs": {i: {} for i in ifs}}

    lab.hosts["appliance"].reply("counters", counters)
    return lab


@pytest.fixture
def lab(netns):
    """The fake embedded testbed for sweeps, down, with a healthy worker, a link that validates and
    the appliance's counters."""
    return sweep_ready(netns)


@pytest.fixture
def fake_run(lab, tmp_path):
    """A new run of FAKE_SWEEP on the fake lab: its directory and manifest, as `testbed sweep` starts one."""
    run_dir = tmp_path / "run"
    return run_dir, start_run(run_dir, "fake-1", FAKE_SWEEP, lab)


@pytest.fixture(scope="session")
def paper_model():
    """scripts/paper_model.py as a module (a script, not a package): the paper's devices' tests check
    what it predicts (test_paper_devices, test_paper_devices_int)."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "paper_model.py"
    spec = importlib.util.spec_from_file_location("paper_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module
