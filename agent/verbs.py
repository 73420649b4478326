"""The host agent's verbs: everything the orchestrator asks of a host, one function each.

Arguments and results are JSON values, so the same verbs serve the embedded backend (`ip netns
exec NS python -m agent --serve`) and a real lab (the same over SSH). Each verb builds what it needs on
the host with the host's own facts (its kernel's HZ for a shaping plan, its cgroup version, its Open
vSwitch), so what `--dry-run` prints is what the host applies.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from agent import probe as probe_mod
from agent import services
from appliance.ovsdb import read_bridge
from appliance.replay import TimedOps, plan_replay, replay
from appliance.shaper import PortShaping, Shaper, plan_shaping
from appliance.switch import SCHEMA, Switch
from appliance.tc_ops import TcOp
from client.cpulimit import CpuLimit, detect_version
from contracts.errors import UserError
from contracts.profiles import LinkSpec
from contracts.trace import ReplayPlan
from contracts.units import kernel_hz


def probe(programs: list[str] = (), interfaces: list[str] = (), cgroup: bool = False) -> dict:
    return probe_mod.probe(list(programs), list(interfaces), cgroup)


# ------------------------------------------------------------------ shaping (appliance)
_netlink: list = []  # the agent's one netlink socket, opened by the first shaping verb


def _shaper() -> Shaper:
    """A shaper on the agent's one netlink socket, kept for the agent's life: opening one costs about
    a millisecond, and a rate change between sweep cells is one verb (target: under 10 ms)."""
    if not _netlink:
        from pyroute2 import IPRoute

        _netlink.append(IPRoute())
    return Shaper(connect=lambda: contextlib.nullcontext(_netlink[0]), local=True)


def _shape_answer(plan: list[PortShaping], ops: list[TcOp], missing: set[str] = frozenset()) -> list[dict]:
    """Per port: its plan, whether it exists, and its operations (`ops`, and as `tc` `commands`)."""
    out = []
    for port in plan:
        mine = [op for op in ops if op.ifname == port.ifname]
        out.append(
            {
                **asdict(port),
                "exists": port.ifname not in missing,
                "ops": [op.as_dict() for op in mine],
                "commands": [op.tc() for op in mine],
            }
        )
    return out


def shape_plan(link: dict, up_if: str, down_if: str) -> list[dict]:
    """What `shape.apply` would do now: the operations planned from the ports' state in the kernel."""
    plan = plan_shaping(LinkSpec.from_dict(link), up_if, down_if)
    shaper = _shaper()
    states = shaper.states(plan)
    missing = {name for name, state in states.items() if not state.exists}
    return _shape_answer(plan, shaper.plan(plan, states), missing)


def shape_apply(link: dict, up_if: str, down_if: str) -> list[dict]:
    """Apply the link; the answer carries the operations executed (what `shape.plan` prints)."""
    plan = plan_shaping(LinkSpec.from_dict(link), up_if, down_if)
    return _shape_answer(plan, _shaper().apply(plan))


def _replay_ops(plan: dict, link: dict, up_if: str, down_if: str) -> tuple[ReplayPlan, list[TimedOps]]:
    """The trace (validated here, where it enters the host) and its timed operations from the
    ports' state now, with this host's HZ: what `shape.replay` executes."""
    trace = ReplayPlan.from_dict(plan)
    ports = plan_shaping(LinkSpec.from_dict(link), up_if, down_if)
    shaper = _shaper()
    return trace, plan_replay(
        trace, LinkSpec.from_dict(link), up_if, down_if, shaper.states(ports), kernel_hz()
    )


def shape_replay_plan(plan: dict, link: dict, up_if: str, down_if: str) -> list[dict]:
    """What `shape.replay` would do now, step by step: `t_s` and the `tc` commands (the dry run)."""
    return [step.as_dict() for step in _replay_ops(plan, link, up_if, down_if)[1]]


def shape_replay(plan: dict, link: dict, up_if: str, down_if: str, start: float) -> dict:
    """Replay a trace: each step's in-place class change at `start + t_s` (`start` in wall-clock
    seconds, the instant every row refers to), both ports' counters sampled at each step; returns
    when the trace has been played, with what was applied and when (`appliance.replay`)."""
    shaper = _shaper()
    shaper.indexes([up_if, down_if])  # a missing port is refused before anything changes
    trace, timed = _replay_ops(plan, link, up_if, down_if)
    if trace.needs_netem:
        shaper.check_netem()
    start_mono = time.monotonic() + (start - time.time())  # the one conversion between the clocks
    answer = replay(shaper, timed, trace.end_s, [up_if, down_if], start_mono)
    return {"start": start, **answer}


def shape_classes(ifs: list[str]) -> dict:
    """Our HTB class per port: rate, ceil and counters (the sweep's check after every trial)."""
    return _shaper().classes(ifs)


def shape_read(ifs: list[str]) -> dict:
    return _shaper().read(ifs)


def shape_clear(ifs: list[str]) -> None:
    _shaper().clear(ifs)


# ------------------------------------------------------------------ client CPU limit
def _cgroup(name: str, quota: float = 1.0) -> CpuLimit:
    return CpuLimit(name, quota)


def cpu_apply(name: str, quota: float) -> dict:
    limit = _cgroup(name, quota)
    limit.apply()
    return limit.read()


def cpu_read(name: str) -> dict:
    """The limit in force, or {} where there is none (also on a host without a cpu controller)."""
    try:
        detect_version()
    except UserError:
        return {}
    return _cgroup(name).read()


def cpu_remove(name: str) -> bool:
    try:
        detect_version()
    except UserError:
        return False
    limit = _cgroup(name)
    existed = limit.exists()
    limit.remove()
    return existed


# ------------------------------------------------------------------ services
def service_start(dir: str, name: str, argv: list[str], env: dict | None = None) -> int:
    return services.start(Path(dir), name, argv, env)


def service_stop(dir: str, name: str) -> bool:
    return services.stop(Path(dir), name)


def service_status(dir: str, name: str) -> int | None:
    return services.pid_of(Path(dir), name)


def grpc_ready(target: str, wait: float = 2.0) -> bool:
    """Whether this host completes an HTTP/2 handshake with the gRPC server at `target` (HOST:PORT).

    Imported here: gRPC, NumPy and requests would add half a second to every other verb (a rate
    change between cells is one), and a host without grpcio must still answer `probe`.
    """
    from client.grpc_offload import ready

    return ready(target, wait)


# ------------------------------------------------------------------ bridge (appliance)
def _switch(
    bridge: str,
    rundir: str,
    ports: list[str] = (),
    datapath: str = "netdev",
    own: bool = True,
    more: list[list] = (),
) -> Switch:
    """`more`: further bridges as [name, [ports]] (several clients: the server's bridge)."""
    extra = tuple((str(name), tuple(p)) for name, p in more)
    return Switch(bridge, tuple(ports), Path(rundir), datapath, own, extra)


def bridge_up(
    bridge: str,
    ports: list[str],
    rundir: str,
    datapath: str = "netdev",
    own: bool = True,
    more: list[list] = (),
) -> dict:
    _switch(bridge, rundir, ports, datapath, own, more).up()
    return bridge_status(bridge, rundir, own)


def bridge_down(bridge: str, rundir: str, own: bool = True) -> None:
    """Returns once our OVS daemons have exited; refuses if one outlived SIGKILL."""
    switch = _switch(bridge, rundir, own=own)
    if not switch.down():
        raise UserError(
            f"Open vSwitch daemons of {rundir} still run after SIGKILL: pids "
            + ", ".join(map(str, switch.daemons())),
            "a process stuck in the kernel: see `ps -o pid,stat,wchan -p PIDS`, then run testbed down again",
        )


def bridge_restart(
    bridge: str,
    ports: list[str],
    rundir: str,
    datapath: str = "netdev",
    own: bool = True,
    more: list[list] = (),
) -> dict:
    """The sweep's repair of a broken switch: `bridge.down`, a fresh database, `bridge.up`."""
    _switch(bridge, rundir, ports, datapath, own, more).restart()
    return bridge_status(bridge, rundir, own)


def bridge_health(
    bridge: str,
    rundir: str,
    ports: list[str] = (),
    own: bool = True,
    deep: bool = True,
    more: list[list] = (),
) -> list[str]:
    """What is wrong with the switch (empty: healthy): daemons, and with `deep` the bridge and ports."""
    return _switch(bridge, rundir, ports, own=own, more=more).problems(deep)


def appliance_check(ifs: list[str], bridge: str, rundir: str, own: bool = True) -> dict:
    """What the sweep reads after every shaped trial, in one request: the HTB classes (as
    `shape.classes`) and whether the switch's daemons still run (a quick `bridge.health`)."""
    return {"classes": _shaper().classes(ifs), "switch": _switch(bridge, rundir, own=own).problems()}


def bridge_status(bridge: str, rundir: str, own: bool = True) -> dict | None:
    return read_bridge(_switch(bridge, rundir, own=own).sock, bridge, SCHEMA)


def counters(bridge: str, rundir: str, ifs: list[str], own: bool = True) -> dict:
    """The appliance's counters now: per port HTB (exact) and OVS interface statistics (up to 5 s old)."""
    snapshot = bridge_status(bridge, rundir, own) or {}
    return {
        "at": time.time(),
        "htb": _shaper().classes(ifs),  # per port: rate, ceil and counters
        "ovs": {i: s for i, s in (snapshot.get("interfaces") or {}).items() if i in ifs},
    }


VERBS: dict[str, Callable] = {
    "probe": probe,
    "shape.plan": shape_plan,
    "shape.apply": shape_apply,
    "shape.read": shape_read,
    "shape.classes": shape_classes,
    "shape.replay.plan": shape_replay_plan,
    "shape.replay": shape_replay,
    "shape.clear": shape_clear,
    "cpu.apply": cpu_apply,
    "cpu.read": cpu_read,
    "cpu.remove": cpu_remove,
    "service.start": service_start,
    "service.stop": service_stop,
    "service.status": service_status,
    "grpc.ready": grpc_ready,
    "bridge.up": bridge_up,
    "bridge.down": bridge_down,
    "bridge.status": bridge_status,
    "bridge.health": bridge_health,
    "bridge.restart": bridge_restart,
    "appliance.check": appliance_check,
    "counters": counters,
}
