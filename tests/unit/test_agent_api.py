"""The host agent's verbs as types (contracts/agent_api.py, contracts/agent_answers.py), without root:
each request encodes to the payload its verb has always taken, a field a request lacks is a bug at
both ends, and answers come back typed, or as a bug when they do not fit."""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from pathlib import PurePosixPath

import pytest

from agent import __main__ as agent_main
from agent import probe as agent_probe
from agent.verbs import VERBS
from contracts import agent_api as api
from contracts.agent_answers import BridgeSnapshot, CpuLimitReading, PortPlan, ProbeReport
from contracts.command import Result
from contracts.errors import AgentBug, UserError
from contracts.message import decode, encode
from contracts.profiles import LinkSpec
from contracts.trace import ReplayPlan, TraceStep
from testbed.backends.host import Host
from testbed.inventory import HostSpec
from tests.fakes import FakeHost

LINK = LinkSpec(20_000_000, 10_000_000, delay_ms=5.0)
PLAN = ReplayPlan((TraceStep(0.0, 10**7, 10**7), TraceStep(1.0, 0, 10**7)), 2.0, "t.csv")
SWITCH = {"bridge": "tb-br0", "rundir": "/run/tb/ovs", "own": True}
PORTS = {"up_if": "tb-a1", "down_if": "tb-a0"}

# each verb's request, and the payload the orchestrator sent for it before the verbs had types
# (the keyword arguments of `host.agent(verb, ...)` at each call site, as JSON)
PAYLOADS = [
    (
        api.Probe(programs=("ip", "ovs-vsctl"), interfaces=("eth1",), cgroup=True),
        {"programs": ["ip", "ovs-vsctl"], "interfaces": ["eth1"], "cgroup": True},
    ),
    (api.ShapePlan(link=LINK, **PORTS), {"link": LINK.as_dict(), **PORTS}),
    (api.ShapeApply(link=LINK, **PORTS), {"link": LINK.as_dict(), **PORTS}),
    (api.ShapeRead(ifs=("tb-a1", "tb-a0")), {"ifs": ["tb-a1", "tb-a0"]}),
    (api.ShapeClasses(ifs=("tb-a1", "tb-a0")), {"ifs": ["tb-a1", "tb-a0"]}),
    (api.ShapeClear(ifs=("tb-a1", "tb-a0")), {"ifs": ["tb-a1", "tb-a0"]}),
    (api.ShapeNetem(), {}),
    (
        api.ShapeReplayPlan(plan=PLAN, link=LINK, **PORTS),
        {"plan": PLAN.as_dict(), "link": LINK.as_dict(), **PORTS},
    ),
    (
        api.ShapeReplay(plan=PLAN, link=LINK, start=1000.5, **PORTS),
        {"plan": PLAN.as_dict(), "link": LINK.as_dict(), "start": 1000.5, **PORTS},
    ),
    (api.CpuApply(name="tbf-client", quota=0.25), {"name": "tbf-client", "quota": 0.25}),
    (api.CpuRead(name="tbf-client"), {"name": "tbf-client"}),
    (api.CpuRemove(name="tbf-client"), {"name": "tbf-client"}),
    (
        api.ServiceStart(dir="/run/tb", name="server-iperf3", argv=("iperf3", "-s"), env={"X": "1"}),
        {"dir": "/run/tb", "name": "server-iperf3", "argv": ["iperf3", "-s"], "env": {"X": "1"}},
    ),
    (api.ServiceStop(dir="/run/tb", name="server-iperf3"), {"dir": "/run/tb", "name": "server-iperf3"}),
    (api.ServiceStatus(dir="/run/tb", name="server-iperf3"), {"dir": "/run/tb", "name": "server-iperf3"}),
    (api.GrpcReady(target="10.0.0.2:50051", wait=60.0), {"target": "10.0.0.2:50051", "wait": 60.0}),
    (api.TaglessReady(target="10.0.0.2:50061", wait=9.0), {"target": "10.0.0.2:50061", "wait": 9.0}),
    (
        api.BridgeUp(ports=("tb-a0", "tb-a1"), datapath="netdev", **SWITCH),
        {"ports": ["tb-a0", "tb-a1"], "datapath": "netdev", **SWITCH},
    ),
    (
        api.BridgeUp(ports=("tb-a0",), more=(("tb-br1", ("tb-a1", "tb-t0")),), datapath="netdev", **SWITCH),
        {"ports": ["tb-a0"], "more": [["tb-br1", ["tb-a1", "tb-t0"]]], "datapath": "netdev", **SWITCH},
    ),
    (api.BridgeDown(**SWITCH), SWITCH),
    (api.BridgeStatus(**SWITCH), SWITCH),
    (api.BridgeHealth(ports=("tb-a0", "tb-a1"), **SWITCH), {"ports": ["tb-a0", "tb-a1"], **SWITCH}),
    (
        api.BridgeRestart(ports=("tb-a0", "tb-a1"), datapath="system", **SWITCH),
        {"ports": ["tb-a0", "tb-a1"], "datapath": "system", **SWITCH},
    ),
    (api.ApplianceCheck(ifs=("tb-a1", "tb-a0"), **SWITCH), {"ifs": ["tb-a1", "tb-a0"], **SWITCH}),
    (api.ApplianceCounters(ifs=("tb-a1", "tb-a0"), **SWITCH), {"ifs": ["tb-a1", "tb-a0"], **SWITCH}),
]


@pytest.mark.parametrize(("request_", "payload"), PAYLOADS, ids=lambda p: getattr(p, "VERB", ""))
def test_a_request_is_the_payload_its_verb_has_always_taken(request_, payload):
    assert json.loads(json.dumps(request_.to_json())) == payload  # the same keys, the same values
    assert decode(type(request_), payload) == request_  # and what the agent decodes it into


def test_every_verb_has_a_request_type_an_answer_type_and_a_function_that_takes_it():
    assert {type(r).VERB for r, _ in PAYLOADS} == set(api.VERB_TYPES) == set(VERBS)
    for verb, (request_type, answer) in api.VERB_TYPES.items():
        assert verb == request_type.VERB and request_type.ANSWER is answer
        hints = typing.get_type_hints(VERBS[verb])
        assert hints.pop("return") == answer, verb
        assert list(hints.values()) == [request_type], verb


def test_a_field_the_request_lacks_is_a_type_error_where_it_is_built():
    with pytest.raises(TypeError, match="unexpected keyword argument 'wrong'"):
        api.ShapeRead(ifs=("a0",), wrong=1)
    with pytest.raises(TypeError):
        api.CpuRead("positional")  # keyword-only: a field is always named


@dataclass(frozen=True, kw_only=True)
class NewerCpuRead(api.CpuRead):
    """`cpu.read` as an orchestrator with another idea of its fields would send it."""

    dry: bool = False


class InProcess(Host):
    """A host whose agent is `agent.__main__.handle` in this process: the real agent's decoding and
    verbs, with no process in between."""

    spec = HostSpec(role="client", name="here", address=None)
    state_dir = PurePosixPath("/nonexistent")
    cgroup = None
    env: dict = {}
    where = "in this process"

    def _agent_exec(self, verb: str, payload: str, timeout: float) -> Result:
        answer = agent_main.handle(json.dumps({"verb": verb, "args": json.loads(payload)}))
        return Result(self.name, ["agent", verb], 0, json.dumps(answer) + "\n", "")

    def _exec(self, argv, *, timeout, env, input):
        raise NotImplementedError

    def _popen(self, argv, env, **kwargs):
        raise NotImplementedError

    def python(self, module: str, *args: str) -> list[str]:
        return ["python", "-m", module, *args]

    def close(self) -> None:
        pass


def test_an_agent_sent_a_field_its_request_lacks_answers_a_bug_never_a_user_error():
    answer = agent_main.handle(json.dumps({"verb": "cpu.read", "args": {"name": "x", "dry": True}}))
    assert answer["ok"] is False and "error" not in answer
    assert "unexpected keyword argument 'dry'" in answer["bug"]
    with pytest.raises(AgentBug) as exc:
        InProcess().agent(NewerCpuRead(name="tbt-unit-none", dry=True))
    assert not isinstance(exc.value, UserError) and exc.value.verb == "cpu.read"
    assert "unexpected keyword argument 'dry'" in str(exc.value)
    assert InProcess().agent(api.CpuRead(name="tbt-unit-none")) == CpuLimitReading()  # the same, as sent


def test_the_fake_host_decodes_requests_as_the_agent_does():
    fake = FakeHost(HostSpec(role="client", name="client", address=None)).reply("cpu.read", {})
    with pytest.raises(AgentBug, match="unexpected keyword argument 'dry'") as exc:
        fake.agent(NewerCpuRead(name="x", dry=True))
    assert not isinstance(exc.value, UserError)
    assert fake.args("cpu.read") == [{"name": "x", "dry": True}]  # recorded as sent


def test_an_answer_that_is_not_of_the_verbs_answer_type_is_a_bug():
    fake = FakeHost(HostSpec(role="appliance", name="appliance", address=None))
    fake.reply("cpu.remove", "yes").reply("bridge.status", {"name": "tb-br0"}).reply("cpu.read", {"x": 1})
    for request in (
        api.CpuRemove(name="c"),
        api.BridgeStatus(**SWITCH),
        api.CpuRead(name="c"),
    ):
        with pytest.raises(AgentBug, match=request.VERB) as exc:
            fake.agent(request)
        assert not isinstance(exc.value, UserError)


def test_the_real_agent_answers_typed_through_the_host():
    host = InProcess()
    probe = host.agent(api.Probe(programs=("sh",), interfaces=("lo",)))
    assert isinstance(probe, ProbeReport) and probe.programs["sh"] and probe.interfaces == {"lo": True}
    up, down = host.agent(api.ShapePlan(link=LINK, up_if="tbt-nope1", down_if="tbt-nope0"))
    assert isinstance(up, PortPlan) and (up.ifname, up.rate, up.exists) == ("tbt-nope1", 20_000_000, False)
    assert down.ops[0].tc == down.commands[0] and down.delay_ms == 5.0
    assert host.agent(api.ServiceStatus(dir="/nonexistent", name="x")) is None


def test_optional_keys_stay_absent_as_the_agent_always_left_them(monkeypatch):
    """The agent's answers keep their keys: `{}` for no CPU limit, a null fraction under `max`, a
    probe's cgroup only when asked for (null with its error where there is no cpu controller)."""
    assert encode(CpuLimitReading()) == {} and decode(CpuLimitReading, {}) == CpuLimitReading()
    full = {"cgroup": "/sys/fs/cgroup/x", "quota_us": -1, "period_us": 100_000, "fraction": None}
    assert encode(decode(CpuLimitReading, full)) == full
    assert "cgroup" not in encode(agent_probe.probe([], [], cgroup=False))
    assert encode(agent_probe.probe([], [], cgroup=True))["cgroup"] in (1, 2, None)

    def refuse():
        raise UserError("no cpu controller here")

    monkeypatch.setattr(agent_probe, "detect_version", refuse)
    report = encode(agent_probe.probe([], [], cgroup=True))
    assert (report["cgroup"], report["cgroup_error"]) == (None, "no cpu controller here")
    assert decode(BridgeSnapshot | None, None) is None


def test_the_codec_refuses_what_does_not_fit_its_type():
    assert decode(float, 3) == 3 and decode(tuple[str, int], ["a", 1]) == ("a", 1)
    for kind, data in (
        (int, "3"),
        (int, True),
        (bool, 1),
        (str, None),
        (list[str], "ab"),
        (dict[str, int], [1]),
        (tuple[str, int], ["a"]),
        (api.CpuRead, ["x"]),
    ):
        with pytest.raises(TypeError):
            decode(kind, data)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument"):
        decode(api.CpuRead, {})
    with pytest.raises(TypeError, match="a union is of one type and None"):
        decode(int | str, 1)
