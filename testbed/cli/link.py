"""`testbed shape` (a rate, delay and loss, or a trace replayed) and `validate` (the shaped link measured
with iperf3): their parsers and handlers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from contracts.agent_answers import ShapingInForce
from contracts.errors import UserError
from contracts.grid import parse_delays, parse_losses, parse_rates
from contracts.units import format_rate
from testbed.cli.args import (
    RESULTS,
    add_link_flags,
    always,
    load,
    open_lab,
    require_root,
    resolve_link,
)
from testbed.link.trace import DEFAULT_GRANULARITY_MS


def register(sub) -> None:
    p = sub.add_parser("shape", help="set the link's rate (HTB on both appliance egress ports)")
    add_link_flags(p)
    p.add_argument("--dry-run", action="store_true", help="print the tc commands instead of applying them")
    p.add_argument(
        "--trace",
        type=Path,
        help="replay a link trace and return when it has been played: a CSV "
        "(t_s,up_mbps,down_mbps[,delay_ms,loss_pct]; each row holds until the next row's t_s, the last "
        "row's t_s is the end) or a Mahimahi packet-delivery trace (ms per 1500-byte opportunity)",
    )
    p.add_argument("--down-trace", type=Path, help="a second Mahimahi trace for server->client")
    p.add_argument(
        "--granularity",
        type=int,
        default=DEFAULT_GRANULARITY_MS,
        metavar="MS",
        help=f"a Mahimahi trace's interval in ms (default {DEFAULT_GRANULARITY_MS})",
    )
    p.add_argument(
        "--loop",
        type=int,
        nargs="?",
        const=0,
        default=1,
        metavar="N",
        help="play the trace N times (without N: until interrupted)",
    )
    p.add_argument(
        "--check",
        choices=("up", "down"),
        nargs="?",
        const="down",
        default=None,
        help="load one direction with iperf3 during the replay (default down) and compare what each "
        "interval achieved with the trace",
    )
    p.add_argument("--tolerance", type=float, default=10.0, help="--check: allowed error in %% (default 10)")
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        help="--check: write the replay here (default results/trace-*.json)",
    )
    p.set_defaults(handler=cmd_shape, busy=lambda a: not a.dry_run)

    p = sub.add_parser(
        "validate",
        help="measure the shaped link with iperf3 in both directions (and its round trip and loss where "
        "it has a delay or a loss)",
    )
    p.add_argument(
        "--rates", default=None, help="comma-separated rates (Mbit/s or with units); default: the link's"
    )
    p.add_argument(
        "--delays",
        default=None,
        help="one-way delays in ms, each validated with each rate (added both ways; the round trip by "
        "ping and TCP handshake; needs sch_netem), e.g. 0,25,50; default: the link's",
    )
    p.add_argument(
        "--losses",
        default=None,
        help="losses in %% per direction, each validated with each rate (against the pings lost; needs "
        "sch_netem), e.g. 0,5; default: the link's",
    )
    p.add_argument(
        "--duration", type=int, default=3, help="seconds per direction (default 3, after 1 omitted)"
    )
    p.add_argument("--tolerance", type=float, default=5.0, help="allowed deviation in %% (default 5)")
    p.add_argument(
        "--json", type=Path, default=None, help="write the results here (default results/validate-*.json)"
    )
    p.set_defaults(handler=cmd_validate, busy=always)


def cmd_shape(args: argparse.Namespace) -> int:
    if args.trace is not None:
        return cmd_trace(args)
    if args.down_trace is not None or args.check is not None:
        raise UserError("--down-trace and --check go with --trace", "add --trace FILE")
    inv = load(args)
    link = resolve_link(inv.link, args)
    lab = open_lab(inv)
    if args.dry_run:
        # the appliance's own plan from its ports' state now: exactly what `shape` would apply
        where = lab.host("appliance").where
        for port in lab.shape(link, dry_run=True):
            if not port.exists:
                print(f"# {port.ifname} does not exist on {where} (testbed down): shaped as `up` would")
            for cmd in port.commands:
                print(f"on {where}: {cmd}")
        return 0
    require_root()
    lab.require_up()
    lab.shape(link)
    held = held_rates(
        lab.read_shaping(), {"up": (lab.up_if, link.up_rate), "down": (lab.down_if, link.down_rate)}
    )
    extra = ""
    if link.delay_ms or link.loss_pct:
        extra = f", delay {link.delay_ms or 0:g} ms, loss {link.loss_pct or 0:g}%"
    if link.serialize:
        extra += ", each packet serialized at the rate"
    print(
        f"shaped (as the kernel holds it): up (client->server) {format_rate(held['up'])}, "
        f"down (server->client) {format_rate(held['down'])}{extra}"
    )
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    """`shape --trace`: the link flags do not apply; the trace holds both directions."""
    from testbed.link.trace import load_trace
    from testbed.link.trace_check import format_table, summary
    from testbed.link.trace_replay import checked_replay, dry_run, replay
    from testbed.run_files import new_run_id

    flags = [
        f
        for f in ("rate", "up_rate", "down_rate", "ceil", "burst", "delay", "loss")
        if getattr(args, f) is not None
    ]
    if flags:
        given = ", ".join("--" + f.replace("_", "-") for f in flags)
        raise UserError(f"{given} and --trace both set the link", "the trace holds the rates: drop " + given)
    if args.loop < 0:
        raise UserError(f"--loop {args.loop} is negative", "give a number of passes, or --loop alone")
    plan = load_trace(args.trace, args.down_trace, args.granularity)
    lab = open_lab(load(args))
    if args.dry_run:
        for line in dry_run(lab, plan):
            print(line)
        return 0
    require_root()
    lab.require_up()
    passes = "until interrupted" if args.loop == 0 else f"{args.loop} time(s)"
    print(f"replaying {plan.source}: {len(plan.steps)} steps over {plan.end_s:g} s, {passes}", flush=True)
    if args.check is None:
        done = replay(lab, plan, args.loop, on_pass=lambda k, a: print(f"pass {k + 1} played", flush=True))
        print(
            f"trace played from trace_t 0 = {done.start:.6f} (wall clock); latest step {done.lateness() * 1000:.1f} ms late"
        )
        return 0
    done = checked_replay(lab, plan, args.loop, args.check)
    out = args.json or RESULTS / f"{new_run_id('trace')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    verdict = summary(done.checks, args.tolerance)
    out.write_text(json.dumps({"format_version": 1, "summary": verdict, **done.as_dict()}, indent=2) + "\n")
    print(format_table(done.checks))
    print(json.dumps(verdict, indent=2))
    print(f"latest step {done.lateness() * 1000:.1f} ms late; written to {out}")
    if done.flow and "error" in done.flow:
        raise UserError(f"the check's iperf3 flow failed: {done.flow['error']}", "see testbed validate")
    failed = any(v["failed"] for k, v in verdict.items() if k.startswith("htb."))
    return 1 if failed else 0


def held_rates(shaping: dict[str, ShapingInForce], asked: dict[str, tuple[str, int]]) -> dict[str, int]:
    """The rates the kernel holds per direction, refused unless they are what was asked (to HTB's byte/s)."""
    held = {}
    for direction, (port, want) in asked.items():
        htb = shaping[port].htb if port in shaping else None
        got = htb.rate if htb else None
        if got is None or abs(got - want) > 8:
            holds = format_rate(got) if got is not None else "no HTB class"
            raise UserError(
                f"after shaping, the kernel holds {holds} on {port} ({direction}) where "
                f"{format_rate(want)} was asked",
                "choose a rate HTB can represent on this kernel; testbed status shows what is in force",
            )
        held[direction] = got
    return held


def cmd_validate(args: argparse.Namespace) -> int:
    from testbed.link.delay_loss import needs_netem, require_netem
    from testbed.link.validate import format_table, raise_on_failure, validate
    from testbed.run_files import new_run_id

    inv = load(args)
    rates = (
        [int(round(r * 1e6)) for r in parse_rates(args.rates, "--rates")]
        if args.rates
        else sorted({inv.link.up_rate, inv.link.down_rate})
    )
    delays = parse_delays(args.delays, "--delays") if args.delays is not None else ()
    losses = parse_losses(args.losses, "--losses") if args.losses is not None else ()
    if args.duration < 1:
        raise UserError("--duration must be at least 1 second")
    require_root()
    lab = open_lab(inv)
    lab.require_up()
    if any(delays) or any(losses) or (not (delays or losses) and needs_netem(inv.link)):
        require_netem(lab, "the delays/losses to validate")
    checks = validate(lab, rates, args.duration, args.tolerance, delays, losses)
    print(format_table(checks))
    out = args.json or RESULTS / f"{new_run_id('validate')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "tolerance_pct": args.tolerance,
                "duration_s": args.duration,
                "checks": [c.as_dict() for c in checks],
            },
            indent=2,
        )
    )
    print(f"written: {out}")
    raise_on_failure(checks, args.tolerance)
    return 0
