"""The testbed's own commands (up, down, shape, validate, status, exec, speed-table, calibrate): their
parsers and handlers, each handler turning parsed arguments into library calls and printing the outcome."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from contracts.agent_answers import ShapingInForce
from contracts.errors import UserError
from contracts.profiles import MIN_CPU_QUOTA, CpuProfile
from contracts.trials import GRPC_SERVERS, PYTHON, SERVER_STACKS, SERVER_START
from contracts.units import format_rate
from testbed.cli.args import (
    RESULTS,
    add_link_flags,
    always,
    load,
    open_lab,
    parse_rate_list,
    print_json,
    require_root,
    resolve_link,
)
from testbed.devices import load_device
from testbed.experiment import parse_names
from testbed.inventory import MAX_CLIENTS
from testbed.link.trace import DEFAULT_GRANULARITY_MS


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

    p = sub.add_parser("validate", help="measure the shaped link with iperf3 in both directions")
    p.add_argument(
        "--rates", default=None, help="comma-separated rates (Mbit/s or with units); default: the link's"
    )
    p.add_argument(
        "--duration", type=int, default=3, help="seconds per direction (default 3, after 1 omitted)"
    )
    p.add_argument("--tolerance", type=float, default=5.0, help="allowed deviation in %% (default 5)")
    p.add_argument(
        "--json", type=Path, default=None, help="write the results here (default results/validate-*.json)"
    )
    p.set_defaults(handler=cmd_validate, busy=always)

    p = sub.add_parser("status", help="hosts, addresses, bridge, shaping, client CPU limit")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("exec", help="run a command on a host: testbed exec client -- CMD ...")
    p.add_argument("host")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.add_argument("--unlimited", action="store_true", help="on the client: run outside the CPU limit")
    p.set_defaults(handler=cmd_exec)

    p = sub.add_parser(
        "speed-table", help="local matrix multiplication times and GFLOP/s on client and server"
    )
    p.add_argument("--sizes", default="200,400,800", help="matrix sizes (default 200,400,800)")
    p.add_argument("--reps", type=int, default=3)
    p.set_defaults(handler=cmd_speed_table, busy=always)

    p = sub.add_parser("calibrate", help="how closely the client (or server) host emulates a device profile")
    p.add_argument(
        "--device", required=True, help="a device profile (name in experiments/devices, or a file)"
    )
    p.add_argument(
        "--host",
        choices=("client", "server"),
        default="client",
        help="whose work: the client's (default) or the server's (decode the request, compute, encode the "
        "response; scaled mode only)",
    )
    p.add_argument("--sizes", default="200,400,800", help="matrix sizes (default 200,400,800)")
    p.add_argument("--mode", default="scaled", help="scaled (default) or throttle")
    p.add_argument("--ops", default="mul", help="operations (default mul)")
    p.add_argument("--codecs", default="json,ujson,raw", help="codecs (default json,ujson,raw)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--slow-host",
        type=float,
        metavar="FRACTION",
        help="with --mode scaled: hold the calibration under an extra CPU quota of this fraction of a "
        "core, to show the device's times do not depend on the host's speed",
    )
    p.set_defaults(handler=cmd_calibrate, busy=always)


def cmd_up(args: argparse.Namespace) -> int:
    lab = open_lab(load(args).with_clients(args.clients))
    lab.server_stack = args.server_stack
    lab.grpc_servers = parse_names(args.servers, "--servers", GRPC_SERVERS, "server")
    if args.server_workers < 1:
        raise UserError(f"--server-workers {args.server_workers}: must be at least 1")
    if (args.server_workers != 1 or args.pace_server) and args.server_stack != "wsgi":
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
    from testbed.backends.replicas import present_replicas, remove_cpu_lock

    require_root()
    inv = load(args)
    removed = open_lab(inv).down()
    if inv.backend == "netns":  # a sweep's replicas of this testbed, whatever state they were left in
        for replica in present_replicas(inv, STATE_ROOT):
            removed += open_lab(replica).down()
        removed += remove_cpu_lock(STATE_ROOT)
    print("testbed down: " + (", ".join(removed) if removed else "nothing to remove"))
    return 0


def cmd_shape(args: argparse.Namespace) -> int:
    if args.trace is not None:
        from testbed.cli.traces import cmd_trace

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
    print(
        f"shaped (as the kernel holds it): up (client->server) {format_rate(held['up'])}, "
        f"down (server->client) {format_rate(held['down'])}{extra}"
    )
    return 0


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
    from testbed.link.validate import format_table, raise_on_failure, validate
    from testbed.results import new_run_id

    inv = load(args)
    rates = parse_rate_list(args.rates) if args.rates else sorted({inv.link.up_rate, inv.link.down_rate})
    if args.duration < 1:
        raise UserError("--duration must be at least 1 second")
    require_root()
    lab = open_lab(inv)
    lab.require_up()
    checks = validate(lab, rates, args.duration, args.tolerance)
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


def calibrate_device(args: argparse.Namespace, sizes: list[int]) -> int:
    """`calibrate --device`: how closely the client host reaches the device's targets."""
    from contracts.device import Grid
    from testbed.devices import load_device
    from testbed.sweep import device_emulation

    device = load_device(args.device)
    slow_host = args.slow_host
    if slow_host is not None and not MIN_CPU_QUOTA <= slow_host <= 1:
        raise UserError(
            f"--slow-host {slow_host:g} is not a fraction of one core between {MIN_CPU_QUOTA} and 1",
            "e.g. --slow-host 0.5 for a host half as fast",
        )
    ops = [o for o in args.ops.split(",") if o.strip()]
    codecs = [c for c in args.codecs.split(",") if c.strip()]
    if args.host == "server" and (args.mode != "scaled" or slow_host is not None):
        raise UserError("the server is emulated in scaled mode only", "use --mode scaled and no --slow-host")
    require_root()
    inv = load(args)
    if args.host == "client":
        inv = inv.with_client_cpu(device_emulation.client_cpu(device, args.mode))
    else:  # the calibration computes with the device's BLAS threads, as the server does in a sweep
        inv = inv.with_server_blas(device.blas_threads)
    lab = open_lab(inv)
    lab.require_up()
    grid = (
        device_emulation.server_grid(lab, device, ops, sizes, codecs)
        if args.host == "server"
        else Grid.of(ops, sizes, codecs)
    )
    result = device_emulation.emulate(lab, device, args.mode, grid, slow_host)
    if args.json:
        # the kernels: one for every method, or on the cgi stack each method's own ("raw kernel", its key
        # says which)
        kernels = [r for r in result["rows"] if r["work"].split()[-1] == "kernel"]
        stack = [r for r in result["rows"] if r["work"] == SERVER_START]  # the cgi stack's start-up
        codec_rows = [r for r in result["rows"] if r["work"].split()[-1] in ("encode", "decode")]
        keys = ("op", "size", "target_s", "achieved_s", "error_pct", "flagged")
        # throttle: the quota each work ran under, its period, why it is flagged, the first check's error;
        # scaled: how many samples it took to know the work's mean
        extra = ("key", "quota", "period_s", "reason", "first_error_pct", "samples")

        def row(r: dict) -> dict:
            return {**{k: r[k] for k in keys}, **{k: r[k] for k in extra if k in r}}

        print_json(
            {
                "device": device.name,
                "host": args.host,
                "mode": args.mode,
                **{k: result[k] for k in ("slow_host", "quotas") if k in result},
                "rows": [row(r) for r in kernels],
                "codecs": [
                    {"codec": r["work"].split()[0], "stage": r["work"].split()[1], **row(r)}
                    for r in codec_rows
                ],
                **({"stack": [{"cost": r["work"], **row(r)} for r in stack]} if stack else {}),
            }
        )
    else:
        print(device_emulation.format_calibration(result))
    return 0


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 2:
        raise UserError(f"--sizes {text!r} must be matrix sizes of at least 2", "e.g. --sizes 200,400,800")
    return sizes


def cmd_calibrate(args: argparse.Namespace) -> int:
    return calibrate_device(args, _sizes(args.sizes))


def cmd_speed_table(args: argparse.Namespace) -> int:
    from testbed.speed_table import format_speed_table, speed_table

    sizes = _sizes(args.sizes)
    require_root()
    lab = open_lab(load(args))
    lab.require_up()
    rows = speed_table(lab, sizes, args.reps)
    print(format_speed_table(rows, lab.inv.client_cpu.describe()))
    return 0
