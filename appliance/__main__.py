"""`python -m appliance`: what the orchestrator asks of a remote appliance host (SSH backend).

The embedded testbed calls the same Shaper in-process; here it is driven by arguments and answers
in JSON, so an SSH session carries only data, never code.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from appliance.shaper import Shaper, plan_shaping
from contracts.errors import UserError
from contracts.profiles import LinkSpec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m appliance", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("shape", help="HTB (and netem) on the two egress ports")
    p.add_argument("--up-if", required=True, help="port facing the server (client->server leaves here)")
    p.add_argument("--down-if", required=True, help="port facing the client (server->client leaves here)")
    p.add_argument("--link", required=True, help="the LinkSpec as JSON")
    p.add_argument("--dry-run", action="store_true")
    for name in ("read", "clear"):
        p = sub.add_parser(name)
        p.add_argument("--ifs", required=True, help="comma-separated ports")
    args = parser.parse_args(argv)
    shaper = Shaper()
    try:
        if args.action == "shape":
            link = LinkSpec(**json.loads(args.link))
            plan = plan_shaping(link, args.up_if, args.down_if)
            if not args.dry_run:
                shaper.apply(plan)
            json.dump([asdict(p) for p in plan], sys.stdout)
        elif args.action == "read":
            json.dump(shaper.read(args.ifs.split(",")), sys.stdout)
        else:
            shaper.clear(args.ifs.split(","))
    except UserError as exc:
        print(f"appliance: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
