"""Peak memory of one large `mul` on a fresh server and a fresh client, as a multiple of the operands.

Each codec gets a new loopback server (`python -m server`) and a new client process
(`python -m benchmarks.memory client ...`), so nothing of an earlier trial is counted. The peak is the
kernel's high-water mark of resident memory (VmHWM), reset (`/proc/PID/clear_refs` 5) once the process
is ready: after the server's worker answered /v1/health, after the client made its operands. The
figure is what the trial adds to the process's resident memory before it (peak minus idle), as a
multiple of the operands' bytes: the marshalling's and the operation's own memory. The whole peak,
which also counts the interpreter and libraries (about 36 MB for the server, more for the client
with its operands), is in the note; at small sizes that baseline would dominate a peak/operands ratio
and say nothing about the marshalling, so the quick run uses 1000x1000 (16 MB of operands).

Target: `raw` adds at most 4x the operands' bytes on each side.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import Row, skipped
from benchmarks.loopback import REPO, loopback_server, repo_env

SECTION = "memory"
SIZE = 2000
QUICK_SIZE = 1000
CODECS = ("raw", "json")
RAW_TARGET = ("<=", 4.0)
SIDES = ("server", "client")
FIGURE = "peak RSS added / operand bytes"


def vm_kib(pid: int | str, field: str) -> int:
    """A VmXXX line of /proc/PID/status, in KiB."""
    text = Path(f"/proc/{pid}/status").read_text()
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    if not m:
        raise RuntimeError(f"no {field} in /proc/{pid}/status")
    return int(m.group(1))


def reset_peak(pid: int | str = "self") -> bool:
    """Start the high-water mark afresh (Linux >= 4.0); False where the kernel does not allow it."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def client_trial(url: str, codec: str, size: int) -> dict:
    """The client's side, run in a fresh process: make the operands, offload once, report the peak."""
    from client.offload import OffloadClient, make_operands

    operands = make_operands("mul", size, "float64", np.random.default_rng(1))
    with OffloadClient(url, timeout=600) as client:
        client.health()
        idle = vm_kib("self", "VmRSS")
        reset = reset_peak()
        _, stages = client.offload("mul", operands, codec)
        peak = vm_kib("self", "VmHWM")
    return {
        "idle_kib": idle,
        "peak_kib": peak,
        "peak_reset": reset,
        "bytes_up": stages.bytes_up,
        "bytes_down": stages.bytes_down,
    }


def measure(codec: str, size: int, log_dir: Path) -> dict:
    """Server and client peaks of one `mul` with `codec`, each side in a process of its own."""
    with loopback_server(log_dir, "--no-access-log") as server:
        workers = server.worker_pids()
        if len(workers) != 1:
            raise RuntimeError(f"expected one gunicorn worker, found {workers}")
        worker = workers[0]
        server_idle = vm_kib(worker, "VmRSS")
        server_reset = reset_peak(worker)
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.memory", "client", server.url, codec, str(size)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=repo_env(),
            timeout=900,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the client failed: {proc.stderr.strip()[-400:]}")
        client = json.loads(proc.stdout)
        server_peak = vm_kib(worker, "VmHWM")
    return {
        "server": {"idle_kib": server_idle, "peak_kib": server_peak, "peak_reset": server_reset},
        "client": client,
    }


def run(quick: bool = False, size: int | None = None, progress=print) -> list[Row]:
    size = size or (QUICK_SIZE if quick else SIZE)
    operand_bytes = 2 * size * size * 8
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        for codec in CODECS:
            progress(f"memory: one mul {size}x{size} with {codec} (fresh server and client)")
            target = RAW_TARGET if codec == "raw" else None
            try:
                got = measure(codec, size, Path(tmp))
            except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as exc:
                rows += [
                    skipped(SECTION, f"{side} {FIGURE}", f"{codec} {size}", "x", str(exc), target)
                    for side in SIDES
                ]
                continue
            for side in SIDES:
                m = got[side]
                peak, idle = m["peak_kib"] * 1024, m["idle_kib"] * 1024
                rows.append(
                    Row(
                        SECTION,
                        f"{side} {FIGURE}",
                        f"{codec} {size}",
                        (peak - idle) / operand_bytes,
                        "x",
                        target,
                        note=f"peak {peak / 1e6:.0f} MB, {peak / operand_bytes:.2f}x the operands (idle "
                        f"{idle / 1e6:.0f} MB) for {operand_bytes / 1e6:.0f} MB of operands"
                        + ("" if m["peak_reset"] else "; peak since process start (clear_refs refused)"),
                        details={
                            "peak_MB": peak / 1e6,
                            "idle_MB": idle / 1e6,
                            "peak_x": peak / operand_bytes,
                            "operand_MB": operand_bytes / 1e6,
                        },
                    )
                )
    return rows


def cases(quick: bool) -> list[tuple[str, str, str, tuple | None]]:
    size = QUICK_SIZE if quick else SIZE
    return [
        (f"{side} {FIGURE}", f"{c} {size}", "x", RAW_TARGET if c == "raw" else None)
        for c in CODECS
        for side in SIDES
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("client", help="one offloaded mul in this fresh process; prints its peak RSS")
    p.add_argument("url")
    p.add_argument("codec")
    p.add_argument("size", type=int)
    args = parser.parse_args(argv)
    print(json.dumps(client_trial(args.url, args.codec, args.size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
