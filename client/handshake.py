"""The client end of the round-trip check: the time of TCP handshakes with the server host.

Runs on the client host and prints JSON, `{"connect_ms": [...], "errors": [...]}`: per attempt, the
time `connect()` took (SYN out, SYN-ACK in: one round trip), or why it failed (a lost SYN waits for
the kernel's retransmission, so one attempt may take a second or more; the orchestrator judges the
median). The connection is closed at once, before any data: the iperf3 server it meets takes that
and goes on listening.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time


def handshakes(server: str, port: int, count: int, interval: float, timeout: float) -> dict:
    times, errors = [], []
    for i in range(count):
        if i:
            time.sleep(interval)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        started = time.perf_counter()
        try:
            sock.connect((server, port))
            times.append((time.perf_counter() - started) * 1000)
        except OSError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            sock.close()
    return {"connect_ms": times, "errors": errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m client.handshake", description=__doc__)
    parser.add_argument("--server", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between attempts")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds one attempt may take")
    args = parser.parse_args(argv)
    json.dump(handshakes(args.server, args.port, args.count, args.interval, args.timeout), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
