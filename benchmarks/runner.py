"""`testbed bench`: every benchmark in one run; one table, and the same rows as JSON and CSV.

The codec and memory benchmarks run anywhere; the efficiency and orchestration ones need root and
the embedded testbed. Without them (or with `skip_testbed`), and whenever a part fails, its rows are
still in the table, marked `skipped` with the reason, so every run has the same rows.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import codecs, efficiency, fidelity, grid, host, memory, orchestration, rpc
from benchmarks.common import MISS, PASS, SKIPPED, Row, fmt_value, skipped
from benchmarks.session import BenchError, bench_lab, start_worker
from contracts.errors import UserError
from testbed.inventory import Inventory
from testbed.run_files import environment
from testbed.signals import sigterm_as_interrupt
from testbed.sweep.worker_link import WorkerDied

# table order: the host's steadiness as the figures were taken, then the order (marshalling,
# efficiency, memory, orchestration), then the shipped run
MODULES = (host, codecs, efficiency, memory, orchestration, rpc, grid, fidelity)
CSV_COLUMNS = ("section", "figure", "case", "value", "unit", "target", "status", "note", "details")


def expected(quick: bool, modules=MODULES) -> list[tuple[str, str, str, str, tuple | None]]:
    """(section, figure, case, unit, target) of every row a run has, in table order."""
    return [(m.SECTION, *case) for m in modules for case in m.cases(quick)]


def key(section: str, figure: str, case: str) -> str:
    return f"{section}/{figure}/{case}"


def stderr_progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def testbed_rows(inv: Inventory, quick: bool, out_dir: Path, progress: Callable) -> tuple[list[Row], str]:
    """The testbed benchmarks' rows, and why any are missing ('' when none is)."""
    rows: list[Row] = []
    try:
        with bench_lab(inv, progress) as lab:
            worker = start_worker(lab, out_dir / "worker.log")
            try:
                rows += orchestration.run(lab, worker, quick, progress)
                rows += efficiency.run(lab, worker, quick, progress)
                rows += rpc.run(lab, quick, progress)
            finally:
                worker.close()
    except (UserError, BenchError, WorkerDied, TimeoutError, OSError) as exc:
        progress(f"the testbed part failed: {exc}")
        return rows, f"testbed part failed: {exc}"
    return rows, ""


def run_bench(
    inv: Inventory | None,
    out_dir: Path,
    quick: bool = False,
    skip_testbed: bool = False,
    progress: Callable[[str], None] = stderr_progress,
) -> tuple[list[Row], dict]:
    """Run everything; write bench.json, bench.csv and table.txt to `out_dir`; the rows and the JSON."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    probes = host.Probes()
    with sigterm_as_interrupt():  # a kill stops the loopback servers and the testbed like Ctrl-C does
        probes.take()
        rows = codecs.run(quick, progress=progress) + memory.run(quick, progress=progress)
        rows += grid.run(quick) + fidelity.run(quick)
        if skip_testbed or inv is None:
            reason = "--skip-testbed"
        elif os.geteuid() != 0:
            reason = "needs root for the embedded testbed (run it as root)"
        else:
            got, reason = testbed_rows(inv, quick, out_dir, progress)
            rows += got
        probes.take()
        rows.append(probes.row())
    rows = complete(rows, quick, reason or "not measured")

    doc = {
        "quick": quick,
        "started_at": started,
        "ended_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "inventory": str(inv.path) if inv else None,
        "prefix": inv.prefix if inv else None,
        "environment": environment(),
        "summary": summary(rows),
        "rows": [r.as_dict() for r in rows],
    }
    (out_dir / "bench.json").write_text(json.dumps(doc, indent=2))
    with open(out_dir / "bench.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            d = r.as_dict()
            w.writerow(
                {
                    **d,
                    "value": "" if r.value is None else repr(r.value),
                    "target": d["target"] or "",
                    "details": json.dumps(r.details),
                }
            )
    (out_dir / "table.txt").write_text(format_table(rows, doc["environment"], quick) + "\n")
    return rows, doc


def complete(rows: list[Row], quick: bool, reason: str) -> list[Row]:
    """Every expected row in table order; those no benchmark produced are skipped with `reason`."""
    got = {r.key: r for r in rows}
    out = []
    for section, figure, case, unit, target in expected(quick):
        r = got.pop(key(section, figure, case), None)
        out.append(r or skipped(section, figure, case, unit, reason, target))
    return out + list(got.values())  # anything unexpected still shows


def summary(rows: list[Row]) -> dict:
    return {
        "targets": sum(1 for r in rows if r.target is not None),
        "pass": sum(1 for r in rows if r.status == PASS),
        "miss": [r.key for r in rows if r.status == MISS],
        "skipped": sum(1 for r in rows if r.status == SKIPPED),
    }


def format_table(rows: list[Row], env: dict | None = None, quick: bool = False) -> str:
    head = ("section", "figure", "case", "value", "target", "result", "")
    body = [
        (r.section, r.figure, r.case, fmt_value(r.value, r.unit), r.target_text, r.status, r.note)
        for r in rows
    ]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head) - 1)]
    lines = []
    for i, row in enumerate([head, *body]):
        cells = [
            str(c).rjust(w) if j == 3 else str(c).ljust(w)
            for j, (c, w) in enumerate(zip(row[:-1], widths, strict=True))
        ]
        lines.append(("  ".join(cells) + "  " + row[-1]).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    s = summary(rows)
    lines.append(
        f"targets: {s['pass']} of {s['targets']} met"
        + (f"; MISS: {', '.join(s['miss'])}" if s["miss"] else "")
        + (f"; {s['skipped']} row(s) skipped" if s["skipped"] else "")
    )
    if quick:
        lines.append(
            "quick run: smaller sizes and fewer repetitions than the targets are set for "
            "(verdicts indicative only)"
        )
    if env:
        lines.append(
            f"machine: {env.get('cpus')} CPU(s), {env.get('cpu_model')}, kernel {env.get('kernel')}, "
            f"Python {env.get('python')}, NumPy {env.get('numpy')}"
        )
    return "\n".join(lines)
