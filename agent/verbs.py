"""The host agent's verbs: everything the orchestrator asks of a host, one function each.

Each verb takes its request (`contracts.agent_api`, decoded from JSON by `agent.__main__`) and answers
with its answer type (`contracts.agent_answers`), so the same verbs serve the embedded backend (`ip
netns exec NS python -m agent --serve`) and a real lab (the same over SSH). Each verb builds what it
needs on the host with the host's own facts (its kernel's HZ for a shaping plan, its cgroup version,
its Open vSwitch), so what `--dry-run` prints is what the host applies.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agent import probe as probe_mod
from agent import services
from appliance.ovsdb import read_bridge
from appliance.shaper import PortShaping, Shaper, plan_shaping
from appliance.switch import SCHEMA, Switch
from appliance.tc_ops import TcOp
from appliance.trace_player import TimedOps, plan_replay, replay
from client.cpulimit import CpuLimit, detect_version
from contracts import agent_api as api
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
    TcOperation,
)
from contracts.errors import UserError
from contracts.message import decode
from contracts.trace import ReplayPlan
from contracts.units import kernel_hz


def probe(request: api.Probe) -> ProbeReport:
    return probe_mod.probe(list(request.programs), list(request.interfaces), request.cgroup)


# ------------------------------------------------------------------ shaping (appliance)
_netlink: list = []  # the agent's one netlink socket, opened by the first shaping verb


def _shaper() -> Shaper:
    """A shaper on the agent's one netlink socket, kept for the agent's life: opening one costs about
    a millisecond, and a rate change between sweep cells is one verb (target: under 10 ms)."""
    if not _netlink:
        from pyroute2 import IPRoute

        _netlink.append(IPRoute())
    return Shaper(connect=lambda: contextlib.nullcontext(_netlink[0]), local=True)


def _shape_answer(
    plan: list[PortShaping], ops: list[TcOp], missing: set[str] = frozenset()
) -> list[PortPlan]:
    """Per port: its plan, whether it exists, and its operations (`ops`, and as `tc` `commands`)."""
    out = []
    for port in plan:
        mine = [op for op in ops if op.ifname == port.ifname]
        out.append(
            PortPlan(
                **asdict(port),
                exists=port.ifname not in missing,
                ops=[TcOperation(**op.as_dict()) for op in mine],
                commands=[op.tc() for op in mine],
            )
        )
    return out


def _ports(request: api.LinkOnPorts) -> list[PortShaping]:
    return plan_shaping(request.link, request.up_if, request.down_if)


def shape_plan(request: api.ShapePlan) -> list[PortPlan]:
    """What `shape.apply` would do now: the operations planned from the ports' state in the kernel."""
    plan = _ports(request)
    shaper = _shaper()
    states = shaper.states(plan)
    missing = {name for name, state in states.items() if not state.exists}
    return _shape_answer(plan, shaper.plan(plan, states), missing)


def shape_apply(request: api.ShapeApply) -> list[PortPlan]:
    """Apply the link; the answer carries the operations executed (what `shape.plan` prints)."""
    plan = _ports(request)
    return _shape_answer(plan, _shaper().apply(plan))


def _replay_ops(request: api.ShapeReplayPlan | api.ShapeReplay) -> list[TimedOps]:
    """The trace's timed operations from the ports' state now, with this host's HZ: what
    `shape.replay` executes (the trace was validated as the request was decoded, on the host)."""
    states = _shaper().states(_ports(request))
    return plan_replay(request.plan, request.link, request.up_if, request.down_if, states, kernel_hz())


def shape_replay_plan(request: api.ShapeReplayPlan) -> list[ReplayStepPlan]:
    """What `shape.replay` would do now, step by step: `t_s` and the `tc` commands (the dry run)."""
    return [ReplayStepPlan(**step.as_dict()) for step in _replay_ops(request)]


def shape_replay(request: api.ShapeReplay) -> ReplayDone:
    """Replay a trace: each step's in-place class change at `start + t_s` (`start` in wall-clock
    seconds, the instant every row refers to), both ports' counters sampled at each step; returns
    when the trace has been played, with what was applied and when (`appliance.trace_player`)."""
    shaper = _shaper()
    ifs = [request.up_if, request.down_if]
    shaper.indexes(ifs)  # a missing port is refused before anything changes
    trace: ReplayPlan = request.plan
    timed = _replay_ops(request)
    if trace.needs_netem:
        shaper.check_netem()
    start_mono = time.monotonic() + (request.start - time.time())  # the one conversion between the clocks
    answer = replay(shaper, timed, trace.end_s, ifs, start_mono)
    return decode(ReplayDone, {"start": request.start, **answer})


def _classes(ifs: tuple[str, ...]) -> dict[str, HtbClass]:
    """Our HTB class per port: rate, ceil and counters (the sweep's check after every trial)."""
    return decode(dict[str, HtbClass], _shaper().classes(list(ifs)))


def shape_classes(request: api.ShapeClasses) -> dict[str, HtbClass]:
    return _classes(request.ifs)


def shape_read(request: api.ShapeRead) -> dict[str, ShapingInForce]:
    return decode(dict[str, ShapingInForce], _shaper().read(list(request.ifs)))


def shape_netem(request: api.ShapeNetem) -> bool:
    return _shaper().netem_available()


def shape_clear(request: api.ShapeClear) -> None:
    _shaper().clear(list(request.ifs))


# ------------------------------------------------------------------ client CPU limit
def _cgroup(name: str, quota: float = 1.0) -> CpuLimit:
    return CpuLimit(name, quota)


def cpu_apply(request: api.CpuApply) -> CpuLimitReading:
    limit = _cgroup(request.name, request.quota)
    limit.apply()
    return decode(CpuLimitReading, limit.read())


def cpu_read(request: api.CpuRead) -> CpuLimitReading:
    """The limit in force, or an empty reading where there is none (also on a host without a cpu
    controller)."""
    try:
        detect_version()
    except UserError:
        return CpuLimitReading()
    return decode(CpuLimitReading, _cgroup(request.name).read())


def cpu_remove(request: api.CpuRemove) -> bool:
    try:
        detect_version()
    except UserError:
        return False
    limit = _cgroup(request.name)
    existed = limit.exists()
    limit.remove()
    return existed


# ------------------------------------------------------------------ services
def service_start(request: api.ServiceStart) -> int:
    return services.start(Path(request.dir), request.name, request.argv, request.env)


def service_stop(request: api.ServiceStop) -> bool:
    return services.stop(Path(request.dir), request.name)


def service_status(request: api.ServiceStatus) -> int | None:
    return services.pid_of(Path(request.dir), request.name)


def grpc_ready(request: api.GrpcReady) -> bool:
    """Whether this host completes an HTTP/2 handshake with the gRPC server at `target` (HOST:PORT).

    Imported here: gRPC, NumPy and requests would add half a second to every other verb (a rate
    change between cells is one), and a host without grpcio must still answer `probe`.
    """
    from client.grpc_offload import ready

    return ready(request.target, request.wait)


def tagless_ready(request: api.TaglessReady) -> bool:
    """Whether this host's call to the tagless server at `target` is answered (imported here, as
    `grpc_ready`'s client is)."""
    from client.tagless_call import ready

    return ready(request.target, request.wait)


# ------------------------------------------------------------------ bridge (appliance)
def _switch(at: api.SwitchRef, layout: api.Layout | None = None, datapath: str = "netdev") -> Switch:
    """The switch of `at`, with the bridges of `layout` (what building or checking it needs)."""
    ports, more = (layout.ports, layout.more) if layout is not None else ((), ())
    extra = tuple((name, tuple(p)) for name, p in more)
    return Switch(at.bridge, tuple(ports), Path(at.rundir), datapath, at.own, extra)


def _built(
    request: api.BridgeUp | api.BridgeRestart, build: Callable[[Switch], Any]
) -> BridgeSnapshot | None:
    """`build` (up, or a restart) the switch as the request lays it out; the bridge as it is then."""
    build(_switch(request, request, request.datapath))
    return _bridge_status(request)


def bridge_up(request: api.BridgeUp) -> BridgeSnapshot | None:
    return _built(request, Switch.up)


def bridge_restart(request: api.BridgeRestart) -> BridgeSnapshot | None:
    """The sweep's repair of a broken switch: `bridge.down`, a fresh database, `bridge.up`."""
    return _built(request, Switch.restart)


def bridge_down(request: api.BridgeDown) -> None:
    """Returns once our OVS daemons have exited; refuses if one outlived SIGKILL."""
    switch = _switch(request)
    if not switch.down():
        raise UserError(
            f"Open vSwitch daemons of {request.rundir} still run after SIGKILL: pids "
            + ", ".join(map(str, switch.daemons())),
            "a process stuck in the kernel: see `ps -o pid,stat,wchan -p PIDS`, then run testbed down again",
        )


def bridge_health(request: api.BridgeHealth) -> list[str]:
    """What is wrong with the switch (empty: healthy): daemons, and with `deep` the bridge and ports."""
    return _switch(request, request).problems(request.deep)


def appliance_check(request: api.ApplianceCheck) -> ApplianceReading:
    """What the sweep reads after every shaped trial, in one request: the HTB classes (as
    `shape.classes`) and whether the switch's daemons still run (a quick `bridge.health`)."""
    return ApplianceReading(classes=_classes(request.ifs), switch=_switch(request).problems())


def _bridge_status(at: api.SwitchRef) -> BridgeSnapshot | None:
    return decode(BridgeSnapshot | None, read_bridge(_switch(at).sock, at.bridge, SCHEMA))


def bridge_status(request: api.BridgeStatus) -> BridgeSnapshot | None:
    return _bridge_status(request)


def counters(request: api.ApplianceCounters) -> CounterSnapshot:
    """The appliance's counters now: per port HTB (exact) and OVS interface statistics (up to 5 s old)."""
    snapshot = _bridge_status(request)
    interfaces = snapshot.interfaces if snapshot is not None else {}
    return CounterSnapshot(
        at=time.time(),
        htb=_classes(request.ifs),  # per port: rate, ceil and counters
        ovs={i: s for i, s in interfaces.items() if i in request.ifs},
        link=_shaper().sent(list(request.ifs)),
    )


# the verbs by name (each takes its request type, `contracts.agent_api.VERB_TYPES`)
VERBS: dict[str, Callable[[Any], Any]] = {
    "probe": probe,
    "shape.plan": shape_plan,
    "shape.apply": shape_apply,
    "shape.read": shape_read,
    "shape.classes": shape_classes,
    "shape.replay.plan": shape_replay_plan,
    "shape.replay": shape_replay,
    "shape.clear": shape_clear,
    "shape.netem": shape_netem,
    "cpu.apply": cpu_apply,
    "cpu.read": cpu_read,
    "cpu.remove": cpu_remove,
    "service.start": service_start,
    "service.stop": service_stop,
    "service.status": service_status,
    "grpc.ready": grpc_ready,
    "tagless.ready": tagless_ready,
    "bridge.up": bridge_up,
    "bridge.down": bridge_down,
    "bridge.status": bridge_status,
    "bridge.health": bridge_health,
    "bridge.restart": bridge_restart,
    "appliance.check": appliance_check,
    "counters": counters,
}
