"""`testbed guest -- COMMAND`: run a command as root under a stock Debian kernel in QEMU (`testbed.guest`).

For what this machine's kernel lacks (sch_netem, sch_fq, the openvswitch module): the guest boots the
installed `linux-image-amd64` with this machine's root read-only under a tmpfs overlay, runs the
command, and prints its stdout and stderr; its exit status is the command's (124 at the timeout).
"""

from __future__ import annotations

import argparse
import sys

GUEST_TIMEOUT = 124  # exit status when the guest gave no result in time (as timeout(1))


def register(sub) -> None:
    p = sub.add_parser(
        "guest",
        help="run a command as root in a stock Debian kernel under QEMU (netem, fq, the OVS module)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before QEMU is killed (default 300)")
    p.add_argument("--kernel", help="kernel release under /boot (default: the newest installed)")
    p.add_argument("--memory", type=int, default=1024, help="guest memory in MiB (default 1024)")
    p.add_argument("--cpus", type=int, default=1, help="guest CPUs (default 1)")
    p.add_argument("--dry-run", action="store_true", help="print the plan (initramfs, init, QEMU's argv)")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    p.set_defaults(handler=cmd_guest)


def cmd_guest(args: argparse.Namespace) -> int:
    from testbed.guest import plan_guest

    if not args.dry_run:
        from testbed.cli.args import require_root

        require_root()  # the guest reads this machine's whole root, as root
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    plan = plan_guest(command, args.timeout, release=args.kernel, memory_mb=args.memory, cpus=args.cpus)
    if args.dry_run:
        print("\n".join(plan.lines()))
        return 0
    from testbed.guest_run import GuestTimeout, run_guest
    from testbed.signals import sigterm_as_interrupt

    print(f"guest: {plan.kernel.release}, {plan.accel.line()}", file=sys.stderr)
    try:
        with sigterm_as_interrupt():  # a `kill` removes QEMU and the temp dir as Ctrl-C does
            result = run_guest(plan)
    except GuestTimeout as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return GUEST_TIMEOUT
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    print(f"guest: exit status {result.returncode} after {result.seconds:.1f} s", file=sys.stderr)
    return result.returncode
