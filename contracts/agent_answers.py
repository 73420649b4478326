"""What the host agent's verbs answer, as types (the requests are in `contracts.agent_api`).

Each type's fields are the keys the verb has always answered with, so its JSON (`contracts.message`)
is the answer as it was; where a key was sometimes absent the field is `omitted` there. The roles
on the host produce plain dicts (the shaper's readings, OVSDB's snapshot); the agent decodes them
into these types, so an answer that drifted from its type fails on the host, as a bug, with its
traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.message import Message, omitted

answer = dataclass(frozen=True)


# ------------------------------------------------------------------ probe
@answer
class ProbeReport(Message):
    """What a host has, so `up` can list every problem on every host at once."""

    root: bool
    programs: dict[str, str | None]  # program -> its path (None: missing)
    interfaces: dict[str, bool]
    python_modules: dict[str, bool]
    ovs_kernel_module: bool
    ovs_schema: bool
    system_ovs: bool
    tun: bool
    # asked for only: the cgroup version, None (with `cgroup_error`) where there is no cpu controller
    cgroup: int | None = omitted(when=lambda p: p.cgroup is None and p.cgroup_error is None)
    cgroup_error: str | None = omitted()


# ------------------------------------------------------------------ shaping
@answer
class TcOperation(Message):
    """One of the operations a shaping plan applies (`appliance.tc_ops.TcOp`), and its `tc` command."""

    action: str
    kind: str
    ifname: str
    handle: str
    parent: str | None
    params: dict[str, float]
    tc: str


@answer
class PortPlan(Message):
    """One port's shaping (`appliance.shaper.PortShaping`), whether the port exists, and the
    operations that take it there (`ops`, and as `tc` commands)."""

    ifname: str
    direction: str  # up (client->server) or down (server->client)
    rate: int  # bits/s
    ceil: int
    burst: int  # bytes
    cburst: int
    quantum: int
    delay_ms: float | None
    loss_pct: float | None
    netem_limit: int | None
    exists: bool
    ops: list[TcOperation]
    commands: list[str]
    serialize: bool = omitted(False)  # netem's rate at the class's (absent: not serialized)


@answer
class HtbRates(Message):
    """Our HTB class's rate and ceil, in bits/s."""

    rate: int
    ceil: int


@answer
class ShapingInForce(Message):
    """A port's shaping as the kernel holds it: our HTB class (None: none), and whether netem is there."""

    htb: HtbRates | None = None
    netem: bool | None = None


@answer
class ClassCounters(Message):
    """What our HTB class has sent so far, and what it held back."""

    bytes: int
    packets: int
    drops: int
    overlimits: int
    backlog: int


@answer
class HtbClass(ClassCounters):
    """Our HTB class: its counters, rate and ceil (bits/s): what the sweep checks after every trial."""

    rate: int
    ceil: int


@answer
class ReplayStepPlan(Message):
    """One step of a trace's replay as planned: its time in the trace and its `tc` commands."""

    t_s: float
    commands: list[str]


@answer
class ReplaySample(Message):
    """The classes' counters per port at a time of the trace (`t_s`), read `sampled_s` after the
    replay's start."""

    t_s: float
    sampled_s: float
    counters: dict[str, ClassCounters]


@answer
class ReplayStep(ReplaySample):
    """One step as it was played: applied `applied_s` after the start, sampled just after."""

    applied_s: float
    commands: list[str]


@answer
class ReplayDone(Message):
    """One pass of a trace: its start (wall-clock seconds), each step as played, and the end."""

    start: float
    steps: list[ReplayStep]
    end: ReplaySample


# ------------------------------------------------------------------ client CPU limit
@answer
class CpuLimitReading(Message):
    """The CPU limit in force as the kernel reports it; every field None (`{}`) where there is none.
    `fraction` is None too under a quota of `max`."""

    cgroup: str | None = omitted()
    quota_us: int | None = omitted()
    period_us: int | None = omitted()
    fraction: float | None = omitted(when=lambda r: r.fraction is None and r.cgroup is None)


# ------------------------------------------------------------------ bridge (appliance)
@answer
class BridgeSnapshot(Message):
    """The bridge as OVSDB has it now, with each interface's statistics."""

    name: str
    datapath_type: str | None
    ports: list[str]
    interfaces: dict[str, dict[str, int]]


@answer
class ApplianceReading(Message):
    """After every shaped trial: the HTB classes, and what is wrong with the switch's daemons."""

    classes: dict[str, HtbClass]
    switch: list[str]


@answer
class CounterSnapshot(Message):
    """The appliance's counters: per port HTB (exact) and OVS interface statistics (up to 5 s old)."""

    at: float
    htb: dict[str, HtbClass]
    ovs: dict[str, dict[str, int]]
    # per port what the kernel counted it sending (bytes, packets), shaped or not (`Shaper.sent`):
    # an RPC study's wire bytes on the unshaped link. Absent from an agent before it
    link: dict[str, dict[str, int]] | None = omitted()
