"""Complete answers of the host agent's verbs (`contracts.agent_answers`), for the scripts of fake
hosts (`tests.fakes`): an answer that lacks a field is a bug on the orchestrator's side, as it would
be from a real agent, so a script builds whole ones, with what a test does not care about filled in."""

from __future__ import annotations

from dataclasses import asdict

from contracts.agent_answers import (
    BridgeSnapshot,
    ClassCounters,
    HtbClass,
    PortPlan,
    ReplayDone,
    ReplaySample,
    ReplayStep,
)


def port_plan(ifname: str, commands: list[str] = (), exists: bool = True, rate: int = 10**7) -> PortPlan:
    """A port's plan as `shape.plan` and `shape.apply` answer it (no operations but `commands`)."""
    return PortPlan(
        ifname=ifname,
        direction="up",
        rate=rate,
        ceil=rate,
        burst=1600,
        cburst=1600,
        quantum=1514,
        delay_ms=None,
        loss_pct=None,
        netem_limit=None,
        exists=exists,
        ops=[],
        commands=list(commands),
    )


def class_counters(sent: int, overlimits: int = 0) -> ClassCounters:
    """An HTB class's counters: `sent` bytes, and packets held back `overlimits` times."""
    return ClassCounters(bytes=sent, packets=0, drops=0, overlimits=overlimits, backlog=0)


def htb_class(rate: int, sent: int, overlimits: int = 0) -> HtbClass:
    """Our HTB class at `rate` that has sent `sent` bytes (and held packets back `overlimits` times)."""
    return HtbClass(rate=rate, ceil=rate, **asdict(class_counters(sent, overlimits)))


def replay_done(
    start: float,
    steps: list[tuple[float, dict[str, ClassCounters]]],
    end_s: float,
    end: dict[str, ClassCounters],
    late_s: float = 0.0,
) -> ReplayDone:
    """A pass of a trace as `shape.replay` answers it: each step (its time, the counters then)
    applied and sampled `late_s` after its time, the end's counters sampled at `end_s`."""
    return ReplayDone(
        start=start,
        steps=[
            ReplayStep(t_s=t, sampled_s=t + late_s, counters=c, applied_s=t + late_s, commands=[])
            for t, c in steps
        ],
        end=ReplaySample(t_s=end_s, sampled_s=end_s, counters=end),
    )


def bridge_snapshot(name: str, ports, datapath: str | None = "netdev") -> BridgeSnapshot:
    """A bridge as `bridge.status` answers it, with no interface statistics."""
    return BridgeSnapshot(name=name, datapath_type=datapath, ports=list(ports), interfaces={})
