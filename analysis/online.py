"""Decisions over time, analysed: each policy of a stream run against the hindsight oracle.

The oracle decides per task with hindsight: the better of local and remote for that task, from the
always-local and always-remote runs over the same trace and stream (per method: each method has its
own oracle). Per policy and method: the total of its tasks' device times (`spent`: each task's
`t_total` plus the probe the policy ran before it, if any: measuring the link is part of what the
policy costs the device), the oracle's total over the same tasks, the regret (the difference) and
the loss (regret over the oracle's total), its wrong decisions (against the oracle's), its probes
and their seconds, and the total time from arrival to end (waiting for the device included). The
figure shows, per method, the trace's rates, each policy's decision per task at its start, and each
policy's cumulative regret over the trace's time.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from analysis.load import writable_dir
from contracts.errors import UserError
from contracts.stages import LOCAL
from contracts.tasks import STREAM_FILE, TASKS_FILE, read_tasks
from contracts.trace import ReplayPlan

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend

METRICS_FILE = "online.csv"
ORACLE_FILE = "oracle.csv"


def tasks_frame(run_dir: Path) -> pd.DataFrame:
    """tasks.csv as a frame (one row per task and policy)."""
    records = read_tasks(Path(run_dir) / TASKS_FILE)
    if not records:
        raise UserError(f"{run_dir / TASKS_FILE} holds no task", "run the stream (testbed stream) first")
    return pd.DataFrame([r.__dict__ for r in records])


def probe_seconds(tasks: pd.DataFrame) -> pd.Series:
    """Each task's probe's device seconds (0: no probe; format 1 has none)."""
    return pd.to_numeric(tasks["probe_s"]).fillna(0.0)


def spent(tasks: pd.DataFrame) -> pd.Series:
    """Each task's device seconds under its policy: its trial's and its probe's."""
    return tasks["t_total"] + probe_seconds(tasks)


def oracle(tasks: pd.DataFrame) -> pd.DataFrame:
    """Per method and task: the local and remote times from the static policies' runs, and the best."""
    local = tasks[(tasks["policy"] == "local") & tasks["ok"]].set_index("task")["t_total"]
    out = []
    for method in sorted(m for m in tasks["method"].unique() if m != LOCAL):
        remote = tasks[(tasks["policy"] == f"remote-{method}") & tasks["ok"]].set_index("task")["t_total"]
        both = pd.DataFrame({"local_s": local, "remote_s": remote}).dropna()
        both.index.name = "task"
        if both.empty:
            continue
        both = both.assign(
            method=method,
            best_s=both[["local_s", "remote_s"]].min(axis=1),
            best="remote",
        )
        both.loc[both["local_s"] <= both["remote_s"], "best"] = "local"
        out.append(both.reset_index())
    if not out:
        raise UserError(
            "the stream has no always-local and always-remote runs to build the oracle from",
            "run the stream with policies local and remote",
        )
    return pd.concat(out, ignore_index=True)[["method", "task", "local_s", "remote_s", "best_s", "best"]]


def policy_metrics(tasks: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Per policy and method: totals, regret, loss, wrong decisions and probes over the oracle's tasks."""
    rows = []
    for method, oracle_m in best.groupby("method"):
        for policy, g in tasks.groupby("policy", sort=False):
            if policy != "local" and not policy.endswith(f"-{method}"):
                continue
            joined = g.merge(oracle_m.drop(columns="method"), on="task")
            if joined.empty:
                continue
            ok = joined[joined["ok"]]
            total, oracle_total = spent(ok).sum(), ok["best_s"].sum()
            rows.append(
                {
                    "method": method,
                    "policy": policy,
                    "tasks": len(joined),
                    "failed": int((~joined["ok"]).sum()),
                    "offloaded": int((joined["decision"] == "remote").sum()),
                    "total_s": total,
                    "oracle_s": oracle_total,
                    "regret_s": total - oracle_total,
                    "loss_pct": 100 * (total - oracle_total) / oracle_total if oracle_total else np.nan,
                    "wrong": int((joined["decision"] != joined["best"]).sum()),
                    "probes": int(joined["probe"].sum()),
                    "probe_s": probe_seconds(ok).sum(),
                    "completion_s": (ok["end_s"] - ok["arrival_s"]).sum(),
                }
            )
    return pd.DataFrame(rows)


def over_time_figure(tasks: pd.DataFrame, best: pd.DataFrame, plan: ReplayPlan | None, method: str):
    """The trace's rates, each policy's decisions and its cumulative regret, on the trace's clock."""
    policies = [p for p in tasks["policy"].unique() if p == "local" or p.endswith(f"-{method}")]
    fig, (rate_ax, dec_ax, reg_ax) = plt.subplots(
        3, 1, sharex=True, figsize=(9, 7), height_ratios=[1, 1, 1.4], layout="constrained"
    )
    end = float(tasks["end_s"].max())
    if plan is not None:
        times, up, down = [], [], []
        k = 0
        while k * plan.end_s <= end:
            for i, step in enumerate(plan.steps):
                lo, hi = plan.interval(i)
                times += [k * plan.end_s + lo, k * plan.end_s + hi]
                up += [step.up_bps / 1e6] * 2
                down += [step.down_bps / 1e6] * 2
            k += 1
        rate_ax.plot(times, up, label="up (client -> server)")
        rate_ax.plot(times, down, "--", label="down")
        rate_ax.legend(loc="upper right", fontsize=8)
    rate_ax.set_ylabel("trace (Mbit/s)")
    m = best[best["method"] == method].set_index("task")
    for y, policy in enumerate(policies):
        g = tasks[tasks["policy"] == policy].sort_values("start_s")
        _decision_row(dec_ax, y, g["start_s"], g["decision"] == "remote")
        g = g[g["ok"] & g["task"].isin(m.index)]
        regret = (spent(g).to_numpy() - m.loc[g["task"], "best_s"].to_numpy()).cumsum()
        reg_ax.step(g["end_s"], regret, where="post", label=policy)
    oracle_y = len(policies)
    o = m.join(tasks[tasks["policy"] == "local"].set_index("task")["start_s"])
    _decision_row(dec_ax, oracle_y, o["start_s"], o["best"] == "remote", labelled=True)
    dec_ax.set_yticks(range(len(policies) + 1), [*policies, "oracle"])
    dec_ax.legend(loc="upper right", fontsize=8)
    dec_ax.set_ylabel("decision at start")
    reg_ax.set_ylabel("cumulative regret (s)")
    reg_ax.set_xlabel("trace time (s)")
    reg_ax.legend(fontsize=8)
    fig.suptitle(f"Decisions over time, {method}")
    return fig


def _decision_row(ax, y: int, starts: pd.Series, remote: pd.Series, labelled: bool = False) -> None:
    """One row of decisions at their start times: remote as triangles, local as circles."""
    for chosen, marker, color, size, label in (
        (remote, "^", "#0072B2", 18, "remote"),
        (~remote, "o", "#E69F00", 14, "local"),
    ):
        ax.scatter(starts[chosen], [y] * int(chosen.sum()), marker=marker, color=color, s=size,
                   label=label if labelled else None)  # fmt: skip


def analyze_stream(run_dir: Path) -> Path:
    """The metrics, the oracle, the figure per method and a report, in RUN_DIR/analysis."""
    run_dir = Path(run_dir)
    tasks = tasks_frame(run_dir)
    best = oracle(tasks)
    metrics = policy_metrics(tasks, best)
    out = writable_dir(run_dir / "analysis", "make the run directory writable")
    metrics.to_csv(out / METRICS_FILE, index=False, float_format="%.6g")
    best.to_csv(out / ORACLE_FILE, index=False, float_format="%.6g")
    plan = None
    record = run_dir / STREAM_FILE
    if record.is_file():
        plan = ReplayPlan.from_dict(json.loads(record.read_text())["plan"])
    figures = []
    for method in sorted(best["method"].unique()):
        fig = over_time_figure(tasks, best, plan, method)
        name = f"over-time-{method}.png"
        fig.savefig(out / name, dpi=150, metadata={"Software": None})
        plt.close(fig)
        figures.append(name)
    write_report(out, metrics, figures, plan)
    return out


def write_report(out: Path, metrics: pd.DataFrame, figures: list[str], plan: ReplayPlan | None) -> None:
    from analysis.report_html import CSS, e, table

    trace = e(plan.source) if plan is not None else "(no stream.json)"
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>Decisions over time</title><style>{CSS}</style></head><body>",
        "<h1>Decisions over time</h1>",
        f"<p>Trace: {trace}. Each policy ran the same task stream on the trace replayed from its start.</p>",
        "<h2>Policies against the hindsight oracle</h2>",
        '<p class="note">Oracle: per task, the better of its always-local and always-remote times (per '
        "method). total_s: the policy's device times, its probes' (probe_s) included; regret_s = total_s - "
        "oracle_s; wrong: decisions unlike the oracle's; completion_s: from arrival to end, waiting "
        "included.</p>",
        table(metrics),
        "<h2>Over time</h2>",
        *(f'<figure><img src="{e(f)}" alt="{e(f)}"></figure>' for f in figures),
        "</body></html>",
    ]
    (out / "report.html").write_text("\n".join(parts) + "\n")
