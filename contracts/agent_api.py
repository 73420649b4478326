"""The host agent's verbs as types: per verb, the request the orchestrator sends and what it answers.

The orchestrator asks `host.agent(ShapeClasses(ifs=(up, down)))` and gets a `dict[str, HtbClass]`
back; the agent decodes the same request type and calls its verb with it. Both ends encode with the
one codec (`contracts.message`), and the JSON is what the verbs exchanged before they had types (a
request's keys are its fields), so an agent and an orchestrator of this version speak as before.

A request is a frozen, keyword-only dataclass: a field it lacks is a TypeError where it is built, and
an agent sent such a key answers with a bug (the orchestrator raises `AgentBug`), never a user error.
`VERB_TYPES` maps each verb's name to its request type and its answer type (the request's type
argument, `Request[Answer]`). The answers are in `contracts.agent_answers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, get_args, get_origin

from contracts.agent_answers import (
    ApplianceReading,
    BridgeSnapshot,
    CounterSnapshot,
    CpuLimitReading,
    HtbClass,
    PortPlan,
    ProbeReport,
    ReplayDone,
    ReplayStepPlan,
    ShapingInForce,
)
from contracts.message import Message, omitted
from contracts.profiles import LinkSpec
from contracts.trace import ReplayPlan

A = TypeVar("A")
R = TypeVar("R", bound="Request")
VERB_TYPES: dict[str, tuple[type[Request], Any]] = {}  # verb -> (request type, answer type)


class Request(Message, Generic[A]):
    """A request of the verb `VERB`, answered with an `A` (`ANSWER`, the type to decode it as)."""

    __slots__ = ()
    VERB: ClassVar[str]
    ANSWER: ClassVar[Any]


def verb(name: str):
    """Register a request type as the verb `name`, answered by its `Request[...]` type argument."""

    def register(cls: type[R]) -> type[R]:
        (answer,) = [get_args(b)[0] for b in cls.__orig_bases__ if get_origin(b) is Request]
        cls.VERB, cls.ANSWER = name, answer
        VERB_TYPES[name] = (cls, answer)
        return cls

    return register


request = dataclass(frozen=True, kw_only=True)  # every request: frozen, its fields named


# ------------------------------------------------------------------ what several requests share
@request
class Ports(Message):
    """Appliance ports by name."""

    ifs: tuple[str, ...]


@request
class LinkOnPorts(Message):
    """The link to shape, on the port facing the server (`up_if`) and the one facing the client."""

    link: LinkSpec
    up_if: str
    down_if: str


@request
class SwitchRef(Message):
    """The bridge as the bridge verbs find it: its name, the daemons' run dir, and whether those
    daemons are ours (`own`) or the machine's Open vSwitch."""

    bridge: str
    rundir: str
    own: bool = True


@request
class Layout(Message):
    """The bridge's ports, and further bridges as (name, ports) (several clients: the server's)."""

    ports: tuple[str, ...]
    more: tuple[tuple[str, tuple[str, ...]], ...] = omitted(())


@request
class ServiceRef(Message):
    """A background service: its state dir on the host and its name."""

    dir: str
    name: str


# ------------------------------------------------------------------ the verbs
@verb("probe")
@request
class Probe(Request[ProbeReport]):
    programs: tuple[str, ...] = ()
    interfaces: tuple[str, ...] = ()
    cgroup: bool = False


@verb("shape.plan")
@request
class ShapePlan(LinkOnPorts, Request[list[PortPlan]]):
    """What `shape.apply` would do now, from the ports' state (the dry run)."""


@verb("shape.apply")
@request
class ShapeApply(LinkOnPorts, Request[list[PortPlan]]):
    pass


@verb("shape.read")
@request
class ShapeRead(Ports, Request[dict[str, ShapingInForce]]):
    pass


@verb("shape.classes")
@request
class ShapeClasses(Ports, Request[dict[str, HtbClass]]):
    pass


@verb("shape.clear")
@request
class ShapeClear(Ports, Request[None]):
    pass


@verb("shape.netem")
@request
class ShapeNetem(Request[bool]):
    """Whether the host's kernel can make a netem qdisc (probed on its loopback, leaving nothing)."""


@verb("shape.replay.plan")
@request
class ShapeReplayPlan(LinkOnPorts, Request[list[ReplayStepPlan]]):
    plan: ReplayPlan


@verb("shape.replay")
@request
class ShapeReplay(LinkOnPorts, Request[ReplayDone]):
    plan: ReplayPlan
    start: float  # wall-clock seconds: trace_t 0


@verb("cpu.apply")
@request
class CpuApply(Request[CpuLimitReading]):
    name: str
    quota: float


@verb("cpu.read")
@request
class CpuRead(Request[CpuLimitReading]):
    name: str


@verb("cpu.remove")
@request
class CpuRemove(Request[bool]):
    """Answers whether there was a limit to remove."""

    name: str


@verb("service.start")
@request
class ServiceStart(ServiceRef, Request[int]):
    """Answers the service's pid."""

    argv: tuple[str, ...]
    env: dict[str, str] | None = None


@verb("service.stop")
@request
class ServiceStop(ServiceRef, Request[bool]):
    """Answers whether one was running."""


@verb("service.status")
@request
class ServiceStatus(ServiceRef, Request[int | None]):
    """Answers the pid of the service running, or None."""


@verb("grpc.ready")
@request
class GrpcReady(Request[bool]):
    target: str  # HOST:PORT
    wait: float = 2.0


@verb("tagless.ready")
@request
class TaglessReady(Request[bool]):
    """Answers whether the tagless server at `target` (HOST:PORT) answers a call within `wait` seconds."""

    target: str
    wait: float = 2.0


@verb("bridge.up")
@request
class BridgeUp(SwitchRef, Layout, Request[BridgeSnapshot | None]):
    datapath: str = "netdev"


@verb("bridge.restart")
@request
class BridgeRestart(SwitchRef, Layout, Request[BridgeSnapshot | None]):
    """The sweep's repair of a broken switch: down, a fresh database, up."""

    datapath: str = "netdev"


@verb("bridge.down")
@request
class BridgeDown(SwitchRef, Request[None]):
    pass


@verb("bridge.status")
@request
class BridgeStatus(SwitchRef, Request[BridgeSnapshot | None]):
    pass


@verb("bridge.health")
@request
class BridgeHealth(SwitchRef, Layout, Request[list[str]]):
    """Answers what is wrong with the switch (empty: healthy); `deep` also checks bridge and ports."""

    deep: bool = omitted(True)


@verb("appliance.check")
@request
class ApplianceCheck(SwitchRef, Ports, Request[ApplianceReading]):
    """What the sweep reads after every shaped trial, in one request."""


@verb("counters")
@request
class ApplianceCounters(SwitchRef, Ports, Request[CounterSnapshot]):
    pass
