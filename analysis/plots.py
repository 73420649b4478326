"""The figures, written as PNG (for the report) and SVG (for a paper), and the list the report embeds.

Figures are built on `matplotlib.figure.Figure` rather than pyplot: nothing global to close or leak, and
no display backend is needed (the PNG/SVG writers are Agg-based).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import pandas as pd

from analysis.cells import cell_devices, method_order
from analysis.contention import contention_figure
from analysis.decision_plots import decision_map, decisions_figure
from analysis.devices import device_key, role_devices
from analysis.fidelity_plots import fidelity_figure
from analysis.link_delay import delay_figure
from analysis.ratio_plots import ratios_figure
from analysis.server_plots import server_labels, servers_figure
from analysis.stage_plots import stage_figure
from analysis.style import STYLE
from contracts.grid import size_label
from contracts.run import Manifest

PNG_DPI = 150
PREFIXES = (
    "stages-",
    "decisions-",
    "decision-map-",
    "ratios-",
    "fidelity",
    "servers-",
    "contention-",
    "delay-",
)
BUILDERS = {
    "stages": stage_figure,
    "decisions": decisions_figure,
    "map": decision_map,
    "ratios": ratios_figure,
    "fidelity": fidelity_figure,
    "servers": servers_figure,
    "contention": contention_figure,
    "delay": delay_figure,
}


@dataclass(frozen=True)
class Plot:
    kind: str  # stages | decisions | map | ratios | fidelity | servers | contention | delay
    title: str
    png: Path
    svg: Path
    # what it is of, for the report to find its data: stages (op, size, device), map (op, method),
    # decisions, servers and contention (op,), ratios (op, device), fidelity (role, device key)
    about: tuple = ()


@dataclass(frozen=True)
class Job:
    """One figure to draw: picklable, so figures can be drawn in parallel processes."""

    figure: str  # key of BUILDERS
    args: tuple
    stem: str
    title: str
    kind: str
    about: tuple = ()  # Plot.about


def make_plots(
    cells: pd.DataFrame,
    vectors: pd.DataFrame,
    penalties: pd.DataFrame,
    out_dir: Path,
    workers: int | None = None,
    manifest: Manifest | None = None,
    contention: pd.DataFrame | None = None,
    delays: pd.DataFrame | None = None,
) -> list[Plot]:
    """Every figure of the run, drawn by up to `workers` processes (default: one per CPU, at most 8).

    Drawing dominates the analysis (about a second per figure, 40 figures for the paper's grid), and
    figures are independent, so they are spread over processes.
    """
    remove_plots(out_dir)
    jobs = plan_figures(cells, vectors, penalties) + fidelity_jobs(manifest)
    if contention is not None:  # several clients: the border against their number, per op
        title = (
            "{}: completion time, communication and server queueing against the clients offloading at once"
        )
        jobs += [
            Job("contention", (contention, op), f"contention-{op}", title.format(op), "contention", (op,))
            for op in dict.fromkeys(contention["op"])
        ]
    if delays is not None:  # delay or loss varied: completion time against the round trip, per op
        title = "{}: completion time against the round trip the delay adds"
        jobs += [
            Job("delay", (delays, op), f"delay-{op}", title.format(op), "delay", (op,))
            for op in dict.fromkeys(delays["op"])
        ]
    workers = min(workers or _usable_cpus(), 8, len(jobs))
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        try:
            return _render_in_forks(jobs, out_dir, workers)
        except OSError:  # no semaphores for a pool (some containers): draw them here instead
            pass
    return [render(job, out_dir) for job in jobs]


def _render_in_forks(jobs: list[Job], out_dir: Path, workers: int) -> list[Plot]:
    """Draw in worker processes forked from this one.

    Fork, not spawn or forkserver: those re-import the caller's main module in every worker, which
    fails for a script read from stdin and re-runs an unguarded script's top level. The only other
    threads here are OpenBLAS's idle pool, which resets itself in a forked child (pthread_atfork), so
    the DeprecationWarning Python 3.12+ gives for forking a threaded process is silenced.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"This process .* is multi-threaded", DeprecationWarning)
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(render, jobs, [out_dir] * len(jobs)))


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def remove_plots(out_dir: Path) -> None:
    """Delete figures of an earlier analysis: made from other data, they must not sit next to new tables."""
    for old in out_dir.iterdir():
        if old.suffix in (".png", ".svg") and old.name.startswith(PREFIXES):
            old.unlink()


def plan_figures(cells: pd.DataFrame, vectors: pd.DataFrame, penalties: pd.DataFrame) -> list[Job]:
    """Every figure of the cells. With clients of several devices, the figures drawn against a local
    baseline or a device's JSON cell (stages, ratios) are one per device, each against its own."""
    methods = method_order(cells["method"].unique())
    cells = cells.assign(device=cell_devices(cells["method"]))
    jobs = []
    for (op, size, device), g in cells.groupby(["op", "size", "device"], sort=True):
        jobs.append(
            Job(
                "stages",
                (g, op, size, methods),
                f"stages-{op}-{size}" + (f"-{device}" if device else ""),
                f"{op}, size {size_label(size)}{_on(device)}: completion time by stage",
                "stages",
                (op, size, device),
            )
        )
    for op, g in cells.groupby("op", sort=True):
        jobs.append(
            Job(
                "decisions",
                (
                    vectors[vectors["op"] == op],
                    penalties[penalties["op"] == op],
                    op,
                    methods,
                    g["rate_mbps"].nunique(),
                ),
                f"decisions-{op}",
                f"{op}: offloading decisions and cumulative penalty",
                "decisions",
                (op,),
            )
        )
        for method in methods:
            jobs.append(
                Job(
                    "map",
                    (g[g["method"] == method], op, method),
                    f"decision-map-{op}-{method}",
                    f"{op}, {method}: decision map",
                    "map",
                    (op, method),
                )
            )
        for device, mine in g.groupby("device", sort=True):
            jobs.append(
                Job(
                    "ratios",
                    (mine, op, methods),
                    f"ratios-{op}" + (f"-{device}" if device else ""),
                    f"{op}{_on(device)}: marshalling-to-completion and method-to-JSON ratios",
                    "ratios",
                    (op, device),
                )
            )
        if len(servers := server_labels(methods)) > 1:
            title = f"{op}: the gRPC servers' decode, compute and encode"
            jobs.append(Job("servers", (g, op, servers), f"servers-{op}", title, "servers", (op,)))
    return jobs


def _on(device: str) -> str:
    return f" on {device}" if device else ""


def fidelity_jobs(manifest: Manifest | None) -> list[Job]:
    """One fidelity figure per emulated device (`fidelity-client`, `fidelity-server`), each from its
    device's last calibration; none for a role that ran as its host or was never calibrated."""
    jobs = []
    for role, device in role_devices(manifest):
        if device is None or not device.calibrations:
            continue
        cal = device.calibrations[-1]
        name = device.profile["name"]
        args = (pd.DataFrame(cal.row_dicts()), name, device.mode, cal.tolerance, role)
        title = f"{role} device {name}: target vs achieved ({device.mode})"
        key = device_key(role, device, manifest)
        jobs.append(Job("fidelity", args, f"fidelity-{key}", title, "fidelity", (role, key)))
    return jobs


def render(job: Job, out_dir: Path) -> Plot:
    with matplotlib.rc_context(STYLE):
        fig = BUILDERS[job.figure](*job.args)
        stem = safe_name(job.stem)
        png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
        # solve the layout once, then freeze it: otherwise each savefig draws twice (layout, then output)
        fig.draw_without_rendering()
        fig.set_layout_engine(None)
        fig.savefig(png, dpi=PNG_DPI, metadata={"Software": None})
        fig.savefig(svg, metadata={"Date": None})
    return Plot(job.kind, job.title, png, svg, job.about)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text))
