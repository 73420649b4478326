"""`testbed shape --trace`: the handler that turns the trace flags into a replay (and its check),
kept apart from `testbed.cli.lab` so that the shaping command stays small."""

from __future__ import annotations

import argparse
import json

from contracts.errors import UserError
from testbed.cli.args import RESULTS, load, open_lab, require_root


def cmd_trace(args: argparse.Namespace) -> int:
    """`shape --trace`: the link flags do not apply; the trace holds both directions."""
    from testbed.link.trace import load_trace
    from testbed.link.trace_check import format_table, summary
    from testbed.link.trace_replay import checked_replay, dry_run, replay
    from testbed.results import new_run_id

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
