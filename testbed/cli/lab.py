"""`testbed up`, `down`, `status` and `exec`: the testbed's life cycle and a look inside it; each handler
turns parsed arguments into library calls and prints the outcome."""

from __future__ import annotations

import argparse
import subprocess
import sys

from contracts.errors import UserError
from contracts.hosts import Backend
from contracts.profiles import CpuProfile
from contracts.stages import GRPC_SERVERS, PYTHON, SERVER_STACKS, Stack
from contracts.units import format_rate
from testbed.cli.args import (
    always,
    load,
    open_lab,
    print_json,
    require_root,
)
from testbed.devices import load_device
from testbed.experiment import parse_names
from testbed.inventory import MAX_CLIENTS


def register(sub) -> None:
    p = sub.add_parser("up", help="bring up client, appliance and server")
    p.add_argument("--no-server", action="store_true", help="do not start the offload server")
    p.add_argument(
        "--server-stack",
        choices=SERVER_STACKS,
        default="wsgi",
        help="wsgi: gunicorn (default); cgi: lighttpd running a fresh Python per request (a sweep "
        "uses its experiment's server_stack)",
    )
    p.add_argument(
        "--servers",
        default=PYTHON,
        help=f"the gRPC servers to start, of {', '.join(GRPC_SERVERS)} (default {PYTHON}; a sweep starts "
        "its experiment's servers)",
    )
    p.add_argument(
        "--clients",
        type=int,
        default=1,
        help=f"client hosts, 1 to {MAX_CLIENTS} (default 1), all sharing one shaped link to the server, each "
        "with its own CPU limit: namespaces with a port each (embedded), or the first N client machines "
        "the SSH inventory lists",
    )
    p.add_argument(
        "--server-workers",
        type=int,
        default=1,
        help="requests the offload server works on at once (default 1); the others wait, and the wait "
        "is their `queue` in Server-Timing (wsgi stack)",
    )
    p.add_argument(
        "--pace-server",
        metavar="DEVICE",
        help="a device profile (name or path) whose time every server stage lasts, so that clients "
        "offloading at once queue as they would at that device (wsgi stack)",
    )
    p.set_defaults(handler=cmd_up, busy=always)

    p = sub.add_parser("down", help="remove everything the tool created (idempotent, also after a crash)")
    p.set_defaults(handler=cmd_down, busy=always)

    p = sub.add_parser("status", help="hosts, addresses, bridge, shaping, client CPU limit")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("exec", help="run a command on a host: testbed exec client -- CMD ...")
    p.add_argument("host")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.add_argument("--unlimited", action="store_true", help="on the client: run outside the CPU limit")
    p.set_defaults(handler=cmd_exec)


def cmd_up(args: argparse.Namespace) -> int:
    lab = open_lab(load(args).with_clients(args.clients))
    lab.server_stack = args.server_stack
    lab.grpc_servers = parse_names(args.servers, "--servers", GRPC_SERVERS, "server")
    if args.server_workers < 1:
        raise UserError(f"--server-workers {args.server_workers}: must be at least 1")
    if (args.server_workers != 1 or args.pace_server) and args.server_stack != Stack.WSGI:
        raise UserError(
            "--server-workers and --pace-server are for the wsgi stack", "drop --server-stack cgi"
        )
    lab.work_slots = args.server_workers
    lab.pace = load_device(args.pace_server) if args.pace_server else None
    require_root()
    if lab.up(start_server=not args.no_server):
        hosts = ", ".join(f"{h.role} ({h.where})" for h in lab.hosts.values())
        print(
            f"testbed up: {hosts}; bridge {lab.bridge}; link {format_rate(lab.inv.link.up_rate)} up / "
            f"{format_rate(lab.inv.link.down_rate)} down; client CPU {lab.inv.client_cpu.describe()}"
        )
    else:
        print("testbed is already up (nothing changed); `testbed status` shows it")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from testbed.backends.lab import STATE_ROOT
    from testbed.backends.replicas import present_replicas

    require_root()
    inv = load(args)
    removed = open_lab(inv).down()  # the last embedded testbed's down also removes the CPU lock
    if inv.backend == Backend.NETNS:  # a sweep's replicas of this testbed, whatever state they were left in
        for replica in present_replicas(inv, STATE_ROOT):
            removed += open_lab(replica).down()
    print("testbed down: " + (", ".join(removed) if removed else "nothing to remove"))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    require_root()
    status = open_lab(load(args)).status()
    if args.json:
        print_json(status)
        return 0
    print(f"testbed: {'up' if status['up'] else 'down'} ({status['backend']}, {status['inventory']})")
    for role, h in status["hosts"].items():
        print(f"  {role:<9} {h['name']:<10} {h['where']:<24} {h['address'] or '-'}")
    cpu = status["client_cpu"]
    force = cpu["in_force"]
    forced = (
        f"{force['fraction']:g} of a core ({force['quota_us']}/{force['period_us']} us, {force['cgroup']})"
        if force.get("fraction")
        else "none in force"
    )
    print(f"  client CPU: profile {CpuProfile(**cpu['profile']).describe()}; {forced}")
    if status["up"]:
        b = status["bridge"]
        print(f"  bridge {b['name']} datapath {b['datapath_type']} ports {' '.join(b['ports'])}")
        for direction, s in status["shaping"].items():
            htb = s.get("htb")
            desc = (
                f"htb rate {format_rate(htb['rate'])} ceil {format_rate(htb['ceil'])}"
                if htb
                else "not shaped"
            )
            print(f"  {direction:<22} on {s['port']}: {desc}{' + netem' if s.get('netem') else ''}")
        print(
            "  services: "
            + ", ".join(f"{k} {'running' if v else 'stopped'}" for k, v in status["services"].items())
            + f"; offload server {status['server_url']} ({status['server_stack'] or 'no'} stack), gRPC "
            + ", ".join(
                f"{s} {g['target']}" + ("" if g["answers"] else " (not running)")
                for s, g in status["grpc_servers"].items()
            )
            + "; tagless "
            + ", ".join(
                f"{s} {g['target']}" + ("" if g["answers"] else " (not running)")
                for s, g in status.get("tagless_servers", {}).items()
            )
        )
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UserError("no command given", "write e.g. testbed exec client -- ip addr")
    lab = open_lab(load(args))
    host = lab.find_host(args.host)
    require_root()
    lab.require_up()
    limited = False if args.unlimited else None
    proc = host.popen(cmd, limited=limited, stdout=subprocess.PIPE, stderr=sys.stderr.buffer)
    # Copied through line by line rather than inherited: a remote (SSH) host's output is a channel.
    for line in iter(proc.stdout.readline, b""):
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return proc.wait()
