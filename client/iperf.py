"""The client end of link validation: one iperf3 test through libiperf (the `iperf3` binding).

Runs on the client host and prints iperf3's JSON result, so the orchestrator (local or over SSH)
reads the same data either way. The iperf3 server is the `iperf3 -s` service on the server host.
"""

from __future__ import annotations

import argparse
import json
import sys

import iperf3


def run_test(server: str, port: int, duration: int, reverse: bool, omit: int = 1) -> dict:
    client = iperf3.Client()
    client.server_hostname = server
    client.port = port
    client.duration = duration
    client.omit = omit
    client.reverse = reverse
    client.protocol = "tcp"
    result = client.run()
    if result is None or result.error:
        return {"error": getattr(result, "error", None) or "iperf3 returned no result"}
    return result.json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m client.iperf", description=__doc__)
    parser.add_argument("--server", required=True)
    parser.add_argument("--port", type=int, default=5201)
    parser.add_argument("--duration", type=int, default=3)
    parser.add_argument("--omit", type=int, default=1)
    parser.add_argument(
        "--reverse", action="store_true", help="server sends, client receives (down direction)"
    )
    args = parser.parse_args(argv)
    data = run_test(args.server, args.port, args.duration, args.reverse, args.omit)
    json.dump(data, sys.stdout)
    return 1 if "error" in data else 0


if __name__ == "__main__":
    sys.exit(main())
