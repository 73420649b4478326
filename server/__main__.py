"""`python -m server --bind ADDR --port N [--grpc-port M]`: the offload server (Flask under gunicorn,
and the gRPC transport in a child process when --grpc-port is given)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from contracts.processes import stop_all
from server.wsgi import ServerConfig, serve


def build_parser() -> argparse.ArgumentParser:
    d = ServerConfig()
    p = argparse.ArgumentParser(
        prog="python -m server",
        description="The offload server: whitelisted matrix "
        "operations over HTTP (POST /v1/ops/<op>, GET /v1/health).",
    )
    p.add_argument("--bind", default=d.bind, help=f"address to listen on (default {d.bind})")
    p.add_argument("--port", type=int, default=d.port, help=f"TCP port (default {d.port})")
    p.add_argument(
        "--workers", type=int, default=d.workers, help=f"gunicorn worker processes (default {d.workers})"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=d.threads,
        help="threads per worker: each client sending a request holds one; requests compute one at a "
        f"time (default {d.threads})",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=d.timeout,
        help=f"seconds a request body may take to arrive; later gets 408 (default {d.timeout:g})",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=d.read_timeout,
        help="seconds a client may stay silent: before its first byte, between bytes, for all of its "
        f"headers, or while not reading our response (default {d.read_timeout:g})",
    )
    p.add_argument(
        "--max-body-mb",
        type=float,
        default=d.max_body_mb,
        help=f"largest request body in MiB; larger ones get 413 (default {d.max_body_mb:g})",
    )
    p.add_argument(
        "--log-level", default=d.log_level, choices=["debug", "info", "warning", "error", "critical"]
    )
    p.add_argument("--no-access-log", action="store_true", help="do not log one line per request")
    p.add_argument(
        "--grpc-port", type=int, help="also serve offload.v1.Offload/Execute (gRPC) on this TCP port"
    )
    p.add_argument("--dry-run", action="store_true", help="print the gunicorn settings and exit")
    return p


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ServerConfig:
    if not 0 < args.port < 65536:
        parser.error(f"--port {args.port}: must be 1-65535")
    if args.grpc_port is not None and not (0 < args.grpc_port < 65536 and args.grpc_port != args.port):
        parser.error(f"--grpc-port {args.grpc_port}: must be 1-65535 and not --port")
    if args.workers < 1 or args.threads < 2:
        parser.error("--workers must be at least 1 and --threads at least 2 (one is left for the others)")
    if min(args.timeout, args.read_timeout, args.max_body_mb) <= 0:
        parser.error("--timeout, --read-timeout and --max-body-mb must be positive")
    return ServerConfig(
        bind=args.bind,
        port=args.port,
        workers=args.workers,
        threads=args.threads,
        timeout=args.timeout,
        read_timeout=args.read_timeout,
        max_body_mb=args.max_body_mb,
        log_level=args.log_level,
        access_log=not args.no_access_log,
    )


def spawn_grpc(config: ServerConfig, port: int) -> subprocess.Popen:
    """`server.grpc_service` as a child process: gRPC's threads must not live in gunicorn's forking
    master, so this process never imports grpc."""
    argv = [sys.executable, "-m", "server.grpc_service", "--bind", config.bind, "--port", str(port)]
    return subprocess.Popen([*argv, "--max-body-mb", str(config.max_body_mb), "--parent", str(os.getpid())])


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = config_from_args(args, parser)
    if args.dry_run:
        plan = {
            "server": config.as_dict(),
            "gunicorn": config.gunicorn_options(),
            "grpc_port": args.grpc_port,
        }
        print(json.dumps(plan, indent=2))
        return 0
    grpc = spawn_grpc(config, args.grpc_port) if args.grpc_port else None
    try:
        serve(config)
    finally:  # gunicorn exits through SystemExit on SIGTERM/SIGINT
        if grpc is not None:
            stop_all(lambda: [grpc.pid] if grpc.poll() is None else [])
    return 0


if __name__ == "__main__":
    sys.exit(main())
