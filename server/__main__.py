"""`python -m server --bind ADDR --port N [--grpc-port M [--grpc-servers LANGS]] [--tagless-port T]
[--stack wsgi|cgi]`: the offload server (Flask under gunicorn, or lighttpd running a CGI process per
request with `--stack cgi`), and the gRPC transport in a child process when --grpc-port is given (a
long-lived server on both stacks): in Python, C++, Go, Java or Ruby (`server.languages`), each on a
port of its own. With --tagless-port, the tagless transport's servers too (`contracts.tagless`, the
lightweight-RPC study's service): Python's on that port, and C++'s on the next when --grpc-servers
includes cpp."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contracts.errors import UserError
from contracts.processes import stop_all
from contracts.stages import SERVER_STACKS, Stack, grpc_port, tagless_port, tagless_servers
from server.languages import LANGUAGES, grpc_argv, parse_languages, program, tagless_argv
from server.lighttpd import PASSED_VARS, LighttpdPlan, find_lighttpd
from server.timing import load_pace
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
    _transport_flags(p)
    p.add_argument(
        "--stack",
        choices=SERVER_STACKS,
        default="wsgi",
        help="wsgi: Flask under gunicorn (default); cgi: lighttpd running a fresh Python per request, "
        "as the paper's server did",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        help="--stack cgi: the directory for lighttpd's configuration, CGI script, logs and uploads",
    )
    p.add_argument(
        "--work-slots",
        type=int,
        default=d.work_slots,
        help="requests that decode, compute and encode at once; the others wait for a slot, and the "
        f"wait is the `queue` entry of their Server-Timing (wsgi stack; default {d.work_slots})",
    )
    p.add_argument(
        "--pace",
        help="a server device's profile as JSON: every stage lasts at least the device's time for its "
        "work (the rest slept, inside the request's work slot), so several clients queue as they "
        "would at that device (wsgi stack)",
    )
    _transfer_flags(p)
    p.add_argument("--dry-run", action="store_true", help="print the server's plan and exit")
    return p


def _transport_flags(p: argparse.ArgumentParser) -> None:
    """The long-lived transports beside HTTP: gRPC's servers and the tagless ones."""
    p.add_argument(
        "--grpc-port", type=int, help="also serve offload.v1.Offload/Execute (gRPC) on this TCP port"
    )
    p.add_argument(
        "--grpc-servers",
        default="python",
        help=f"the gRPC servers to run, of {', '.join(LANGUAGES)} (NumPy, Eigen, plain loops; the same "
        f"contract, results and stage timing), each on --grpc-port plus its index in {','.join(LANGUAGES)} "
        "(default python)",
    )
    p.add_argument(
        "--tagless-port",
        type=int,
        help="also serve the tagless transport (the lightweight-RPC study's service) on this TCP port, "
        "and C++'s on the next when --grpc-servers includes cpp",
    )


def _transfer_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--datasets",
        help="serve the energy study's datasets from this directory (GET /v1/datasets/NAME/FILE, wsgi "
        "stack; generated by python -m server.datasets)",
    )


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ServerConfig:
    if not 0 < args.port < 65536:
        parser.error(f"--port {args.port}: must be 1-65535")
    if args.grpc_port is not None and not (
        0 < args.grpc_port < 65536 and args.port not in grpc_ports(args.grpc_port, LANGUAGES).values()
    ):
        parser.error(
            f"--grpc-port {args.grpc_port}: must be 1-65535 and, with the ports after it, not --port"
        )
    try:
        args.grpc_servers = parse_languages(args.grpc_servers)
        for language in args.grpc_servers if args.grpc_port is not None else ():
            program(language)  # built?
            if not 0 < grpc_port(args.grpc_port, language) < 65536:
                raise UserError(
                    f"--grpc-port {args.grpc_port}: {language}'s port is out of range", "pick a lower port"
                )
        for language in tagless_plan(args):
            tagless_argv(language, args.bind, 1, 1.0)  # built?
    except UserError as exc:
        parser.error(str(exc))
    taken = {args.port, *grpc_plan(args).values()}
    if args.tagless_port is not None and (
        not 0 < args.tagless_port <= max(tagless_plan(args).values()) < 65536
        or taken & set(tagless_plan(args).values())
    ):
        parser.error(f"--tagless-port {args.tagless_port}: must be 1-65535 and not --port or a gRPC port")
    if args.workers < 1 or args.threads < 2:
        parser.error("--workers must be at least 1 and --threads at least 2 (one is left for the others)")
    if min(args.timeout, args.read_timeout, args.max_body_mb) <= 0:
        parser.error("--timeout, --read-timeout and --max-body-mb must be positive")
    if args.stack == Stack.CGI and args.state_dir is None:
        parser.error("--stack cgi needs --state-dir (where lighttpd's files go)")
    if args.work_slots < 1 or args.work_slots >= args.threads:
        parser.error("--work-slots must be at least 1 and below --threads (a thread reads each request)")
    if args.stack == Stack.CGI and (args.work_slots != 1 or args.pace):
        parser.error("--work-slots and --pace are for the wsgi stack (cgi runs a process per request)")
    try:
        load_pace(args.pace)
    except UserError as exc:
        parser.error(str(exc))
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
        work_slots=args.work_slots,
        pace=args.pace,
        datasets=args.datasets,
    )


def children_argvs(config: ServerConfig, args: argparse.Namespace) -> list[list[str]]:
    """The long-lived transports' servers this server starts beside it, as child processes, each on
    its own port: the gRPC servers (gRPC's threads must not live in gunicorn's forking master, so this
    process never imports grpc) and the tagless ones. Each stops when this process is gone."""
    argvs = [
        grpc_argv(lang, config.bind, port, config.max_body_mb, parent=os.getpid())
        for lang, port in grpc_plan(args).items()
    ]
    argvs += [
        tagless_argv(lang, config.bind, port, config.max_body_mb, parent=os.getpid())
        for lang, port in tagless_plan(args).items()
    ]
    return argvs


@contextmanager
def children(config: ServerConfig, args: argparse.Namespace) -> Iterator[None]:
    """The transports' servers running for the block; every one started is stopped after it, also
    when a later one fails to start."""
    started: list[subprocess.Popen] = []
    try:
        for argv in children_argvs(config, args):
            started.append(subprocess.Popen(argv))
        yield
    finally:
        stop_children(started)


def stop_children(children: list[subprocess.Popen]) -> None:
    stop_all(lambda: [c.pid for c in children if c.poll() is None])


def grpc_ports(base: int, languages) -> dict[str, int]:
    return {lang: grpc_port(base, lang) for lang in languages}


def tagless_plan(args: argparse.Namespace) -> dict[str, int]:
    """The tagless servers the plan starts: language -> port (none without --tagless-port)."""
    if args.tagless_port is None:
        return {}
    return {lang: tagless_port(args.tagless_port, lang) for lang in tagless_servers(args.grpc_servers)}


def grpc_plan(args: argparse.Namespace) -> dict[str, int]:
    """The gRPC servers the plan starts: language -> port (none without --grpc-port)."""
    return grpc_ports(args.grpc_port, args.grpc_servers) if args.grpc_port is not None else {}


def lighttpd_plan(config: ServerConfig, state_dir: Path) -> LighttpdPlan:
    """The cgi stack's plan from the same settings as the wsgi stack's."""
    return LighttpdPlan(
        bind=config.bind,
        port=config.port,
        state_dir=state_dir,
        max_body_mb=config.max_body_mb,
        read_timeout=config.read_timeout,
        env={k: os.environ[k] for k in PASSED_VARS if k in os.environ},
        program=find_lighttpd(),
    )


def serve_cgi(plan: LighttpdPlan) -> int:
    """lighttpd in the foreground, as this process's child, until it exits or we are told to stop.

    SIGTERM (the agent's `service.stop` signals the whole group anyway) stops lighttpd and returns.
    """
    plan.write()
    lighttpd = subprocess.Popen(plan.argv())

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        return lighttpd.wait()
    finally:
        stop_all(lambda: [lighttpd.pid] if lighttpd.poll() is None else [])


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = config_from_args(args, parser)
    if args.stack == Stack.CGI:
        plan = lighttpd_plan(config, args.state_dir)
        if args.dry_run:
            print(
                json.dumps(
                    {
                        "server": config.as_dict(),
                        "lighttpd": plan.plan(),
                        "grpc": grpc_plan(args),
                        "tagless": tagless_plan(args),
                    },
                    indent=2,
                )
            )
            return 0
        with children(config, args):
            return serve_cgi(plan)
    if args.dry_run:
        plan = {
            "server": config.as_dict(),
            "gunicorn": config.gunicorn_options(),
            "grpc": grpc_plan(args),
            "tagless": tagless_plan(args),
        }
        print(json.dumps(plan, indent=2))
        return 0
    with children(config, args):  # gunicorn exits through SystemExit on SIGTERM/SIGINT
        serve(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
