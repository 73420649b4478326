"""`testbed sweep`: argument parsing and the calls into the sweep and analysis."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from contracts.stages import GRPC_SERVERS, PYTHON
from testbed.cli.args import RESULTS, always, inventories, open_lab, require_root

EXIT_UNUSABLE = 4  # the sweep finished, but some cells have no usable (ok) trial


SHOWN_CELLS = 10  # unusable cells named one a line at the end of a sweep; the rest counted


SWEEP_EXIT = f"""\
exit status:
  0    the sweep finished and every cell has at least one usable (ok) trial
  2    a problem to fix first (one line says what and how; a sweep stopped by one, such as
       a full results file system, continues with --resume RUN_DIR)
  {EXIT_UNUSABLE}    the sweep finished, but some cells have no usable trial (every trial of the cell
       failed or none ran); the summary names them and their most common error
  130  interrupted (Ctrl-C or SIGTERM); continue with --resume RUN_DIR"""


def register(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="run op x size x rate x method x repetitions, then analyze",
        epilog=SWEEP_EXIT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("experiment", nargs="?", type=Path, help="experiment file, e.g. experiments/smoke.yaml")
    p.add_argument("--ops", help="comma-separated, e.g. mul,inv,log")
    p.add_argument("--sizes", help="e.g. 400,800 or 400-1200:100; images in megapixels: 0.3MP,4MP,8MP")
    p.add_argument("--rates", help="Mbit/s, e.g. 10,20,40")
    p.add_argument(
        "--delays",
        help="one-way delays in ms, each a dimension (added both ways; needs sch_netem), e.g. 0,25,50",
    )
    p.add_argument(
        "--losses", help="losses in %% per direction, each a dimension (needs sch_netem), e.g. 0,1,5"
    )
    p.add_argument("--methods", help="marshalling methods, e.g. json,ujson,raw")
    p.add_argument("--reps", help="repetitions per cell: N (fixed) or MIN..MAX (adaptive), e.g. 5..40")
    p.add_argument(
        "--precision", type=float, help="adaptive: a cell also needs its mean's 95%% CI within this fraction"
    )
    p.add_argument("--warmup", type=int)
    p.add_argument("--dtype", help="the operands' dtype: float64 (default), int32 or int64")
    p.add_argument(
        "--int-range",
        help="integer operands' LOW,HIGH as numpy.random.randint draws them (HIGH excluded), e.g. 0,10",
    )
    p.add_argument("--image", help="an image file (PNG or JPEG) the image ops run on, besides --sizes in MP")
    p.add_argument("--codec-text", help="the JSON codecs' text: compact (default) or era (the paper's)")
    p.add_argument("--seed", type=int)
    p.add_argument("--cpu-quota", type=float, help="client CPU limit, fraction of one core")
    p.add_argument("--device", help="client device profile: a name in experiments/devices, or a file")
    p.add_argument("--mode", help="how the device is emulated: scaled (default) or throttle")
    p.add_argument(
        "--server-device", help="server device profile (scaled): a name in experiments/devices, or a file"
    )
    p.add_argument(
        "--connection",
        help="per-trial (a new TCP connection per remote trial, default) or persistent (one for the sweep)",
    )
    p.add_argument(
        "--replicas",
        type=int,
        help="embedded testbeds side by side that share the work (default 1; each with its own prefix)",
    )
    p.add_argument(
        "--server-stack",
        help="how the server runs requests: wsgi (gunicorn, default) or cgi (lighttpd, a fresh Python "
        "per request, as the paper's server did)",
    )
    p.add_argument(
        "--servers",
        help="the gRPC servers the method grpc offloads to, each a cell of its own: "
        f"{', '.join(GRPC_SERVERS)} (default {PYTHON})",
    )
    p.add_argument("--no-validate", action="store_true", help="skip iperf3 validation of each rate")
    p.add_argument("--name", help="run name (the run id is NAME-TIMESTAMP)")
    p.add_argument(
        "--resume", type=Path, metavar="RUN_DIR", help="run the trials missing from an earlier run"
    )
    p.add_argument(
        "--recalibrate",
        action="store_true",
        help="with --resume: calibrate the devices again even on the machine the run's calibration "
        "was made on (default: use it again there)",
    )
    p.add_argument("--results", type=Path, default=RESULTS, help="where runs are written (default results/)")
    p.add_argument("--keep-up", action="store_true", help="leave the testbed up afterwards")
    p.add_argument("--no-analyze", action="store_true", help="do not run the analysis at the end")
    p.set_defaults(handler=cmd_sweep, busy=always)


def cmd_sweep(args: argparse.Namespace) -> int:
    from testbed.backends.replicas import sweep_inventories
    from testbed.estimate import format_duration, replica_hint
    from testbed.experiment import FLAGS
    from testbed.lock import held
    from testbed.sweep.bookkeeping import start_run
    from testbed.sweep.phases import run_sweep
    from testbed.sweep.setup import resolve_setup

    flags = {k: getattr(args, k) for k in FLAGS}
    setup = resolve_setup(
        inventories(args), args.experiment, flags, args.no_validate, args.resume, args.results
    )
    exp, run_dir, device, server_device = setup.exp, setup.run_dir, setup.device, setup.server_device
    require_root()
    labs = [open_lab(i) for i in sweep_inventories(setup.inventories, exp.replicas)]
    if exp.needs_netem:  # refused in one line before anything is written, brought up or calibrated
        from testbed.link.delay_loss import require_netem

        require_netem(labs[0], "the experiment's delays/losses")
    manifest = setup.manifest or start_run(run_dir, setup.run_id, exp, labs[0])
    model = setup.model()
    low, high = model.duration_s()
    print(setup.headline(len(labs)))
    span = format_duration(high) if low == high else f"{format_duration(low)}..{format_duration(high)}"
    whole = " for the whole grid" if args.resume else ""
    print(
        f"estimated duration{whole}: {span} (from the device profile, each method's bytes on the wire, the rates)"
    )
    if not (exp.datasets or exp.rpc_study) and (hint := replica_hint(model.cpu_share(), len(labs))):
        print(hint)
    if not args.resume:
        one = replace(model, replicas=1).sweep_s(exp.reps)
        manifest.update(estimate_s=[low, high], estimate_one_testbed_s=one)
    try:
        with ExitStack() as replicas:  # the inventory's prefix is held already (testbed.cli)
            for lab in labs[1:]:
                replicas.enter_context(held(lab.inv.prefix, f"testbed sweep, replica {lab.inv.prefix}"))
            summary = run_sweep(
                labs,
                exp,
                run_dir,
                manifest,
                keep_up=args.keep_up,
                device=device,
                model=model,
                server_device=server_device,
                recalibrate=args.recalibrate,
            )
    except KeyboardInterrupt:
        print(
            f"sweep interrupted; trials so far are in {run_dir / 'trials.csv'}. "
            f"Continue with: testbed sweep --resume {run_dir}"
        )
        return 130
    print(
        f"sweep {summary['status']}: {summary['ran']} trial(s) run, {summary['failed']} failed; "
        f"{run_dir / 'trials.csv'}"
    )
    if not args.no_analyze:
        from analysis import analyze

        out = analyze(run_dir)
        print(f"analysis: {out} (open {out / 'report.html'})")
    unusable = summary["unusable"]
    if not unusable:
        return 0
    print(unusable_report(unusable, run_dir))
    return EXIT_UNUSABLE


def unusable_report(unusable: list[tuple[str, str]], run_dir: Path, shown: int = SHOWN_CELLS) -> str:
    """The end of a sweep that left cells without a usable trial: one line per cell (at most `shown`)."""
    lines = [f"{len(unusable)} cell(s) have no usable trial:"]
    lines += [f"  {label}: {_clip(why)}" for label, why in unusable[:shown]]
    if len(unusable) > shown:
        lines.append(f"  ... and {len(unusable) - shown} more")
    lines.append(f"every failed trial's error is in {run_dir / 'trials.csv'}")
    return "\n".join(lines)


def _clip(text: str, width: int = 200) -> str:
    line = " ".join(text.split())  # a traceback's lines on one
    return line if len(line) <= width else line[: width - 3] + "..."
