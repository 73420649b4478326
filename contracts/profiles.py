"""The link and the client-CPU profiles: what the orchestrator asks a host to emulate.

Both travel to the hosts as plain JSON (`as_dict` / `from_dict`), so a host needs no YAML reader.
Their range checks live here, once: the inventory, the experiment files and the CLI flags all call
them, so a value means the same wherever it was typed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

from contracts.errors import UserError

MIN_BURST = 1600  # bytes: one full frame and some
MIN_CPU_QUOTA = 0.001  # the kernel's 1 ms quota per its longest 1 s period
MIN_QUOTA_US = 1000
MIN_PERIOD_US = 1000
MAX_PERIOD_US = 1_000_000
# what caps the threads of every BLAS/OpenMP flavour NumPy may be linked against (each set to the
# count), and the OpenBLAS kernel choice: set on the client's commands, passed on to CGI processes.
# OpenCV's own pool (the image ops' filters) too: it ignores OMP_NUM_THREADS, and a worker of its
# pool left waiting on a core the stage's thread holds is counted by the process's clock (measured,
# the multi-language study's grid of 2026-11-28: one trial's 8 MP gray took 1.64 ms of the Python
# gRPC server's CPU in 1.03 ms of wall time where the others took 1.03-1.07 ms)
BLAS_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "OPENCV_FOR_THREADS_NUM",
)
BLAS_CORE_VAR = "OPENBLAS_CORETYPE"
# glibc's malloc in every client and server process the testbed starts: blocks up to 32 MiB from the
# heap, and freed memory kept (up to 1 GiB) rather than given back to the kernel. A long-lived
# process (the trial worker, the gRPC and wsgi servers, the calibration) then reuses the memory a
# trial's matrices had for the next trial's, as its calibration's repeated runs do; otherwise every
# large allocation is fresh pages whose faults the stage's CPU clock counts (measured: a protobuf
# decode of a 1200x1200 request, 1.0 ms, took 4.6 ms with its 2813 page faults; the Python gRPC
# server's such decode came out at 2.5-81 ms on 4 testbeds against 1.2-4.7 ms calibrated). Page
# faults cost what this host's virtualisation makes them cost, not what the device's did. A cgi
# request's fresh process has no freed memory to reuse, and neither has its calibration's.
# One arena (`MALLOC_ARENA_MAX`): without it a thread other than the main one (the gRPC servers'
# pool thread) allocates from an arena of its own, mmapped heaps apart from the main one, and the
# Python gRPC server's decode of a 1200x1200 request still came out at 22-52 ms in a third of the
# 4-testbed check's trials against 1-3 ms in the others (2026-11-27; measured alone: 2132 page faults
# in a pool thread's first decode of an inv 1200 request, none with one arena). Requests run one at
# a time, so one arena costs no waiting.
MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    "MALLOC_ARENA_MAX": "1",
}


# where a kernel has no netem (this project's own machines), in one line that names where it runs: the
# shaper's refusal of a delay or loss, and an experiment's or a validation's refusal before any work
NETEM_MISSING = (
    "delay/loss/serialization need netem, but this kernel has no sch_netem module (CONFIG_NET_SCH_NETEM)"
)
NETEM_FIX = (
    "drop the delay/loss/serialization, or run under a kernel that has it: `testbed guest -- COMMAND` boots Debian's "
    "stock kernel under QEMU and runs the command there as root (docs/commands.md)"
)


@dataclass(frozen=True)
class LinkSpec:
    """Shaping of both directions of the client<->server path, in bits per second."""

    up_rate: int  # client -> server
    down_rate: int  # server -> client
    ceil: int | None = None  # None: equal to the rate
    burst: int | None = None  # bytes; None: derived from the rate and the kernel timer
    mtu: int = 1500
    delay_ms: float | None = None
    loss_pct: float | None = None
    # each packet held for its bytes at the rate, as a line serializes it (netem's `rate` under the
    # HTB class; needs sch_netem): a token bucket alone sends a burst's packets at once, so a message
    # that fits in it crosses at line rate (docs/rpc-study.md)
    serialize: bool = False

    def as_dict(self) -> dict:
        return asdict(self)

    def at_rate(
        self, rate_bps: int, delay_ms: float | None = None, loss_pct: float | None = None
    ) -> LinkSpec:
        """This link at `rate_bps` in both directions (ceil and burst derived from it), with the delay
        and the loss given (None: its own)."""
        link = replace(self, up_rate=rate_bps, down_rate=rate_bps, ceil=None, burst=None)
        if delay_ms is not None:
            link = replace(link, delay_ms=delay_ms)
        return link if loss_pct is None else replace(link, loss_pct=loss_pct)

    @classmethod
    def from_dict(cls, data: dict) -> LinkSpec:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class CpuProfile:
    """How slow the client is: a fraction of one core, BLAS threads capped, optionally older BLAS kernels.

    A quota slows marshalling and computing alike, but an old device is relatively much slower at
    matrix kernels than at Python work (no AVX/FMA); `blas_core` picks OpenBLAS's kernels for an
    older CPU (OPENBLAS_CORETYPE, e.g. Prescott, the paper's Pentium 4) to model that.
    """

    cpu_quota: float | None = None  # fraction of one core; None: no limit
    blas_threads: int = 1
    blas_core: str | None = None

    def describe(self) -> str:
        quota = "unlimited" if self.cpu_quota is None else f"{self.cpu_quota:g} of one core"
        core = f", OpenBLAS {self.blas_core} kernels" if self.blas_core else ""
        return f"{quota}, {self.blas_threads} BLAS thread(s){core}"

    def as_dict(self) -> dict:
        return asdict(self)


def check_burst(burst: int) -> int:
    if burst < MIN_BURST:
        raise UserError(
            f"burst {burst} bytes is smaller than one frame",
            f"give at least {MIN_BURST} bytes or leave it out",
        )
    return burst


def check_cpu_quota(quota: float) -> float:
    if not MIN_CPU_QUOTA <= quota <= 1:
        raise UserError(
            f"cpu_quota {quota} is not a fraction of one core between {MIN_CPU_QUOTA} and 1",
            "e.g. 0.05 for a twentieth of a core, or leave it out for no limit",
        )
    return quota


GRANULARITY_PERIODS = 10  # a throttled stage must span this many quota periods to be trusted


def quota_period(fraction: float) -> tuple[int, int]:
    """(quota_us, period_us) for `fraction` of one core: the shortest period whose quota is the
    kernel's 1 ms minimum. `check_cpu_quota` keeps the fraction where that period is at most 1 s.
    """
    check_cpu_quota(fraction)
    period = min(max(MIN_PERIOD_US, math.ceil(MIN_QUOTA_US / fraction)), MAX_PERIOD_US)
    return max(MIN_QUOTA_US, round(fraction * period)), period


def too_short(target_s: float, fraction: float) -> bool:
    """Whether work that should take `target_s` under `fraction` of a core spans fewer than
    `GRANULARITY_PERIODS` of its quota periods: the kernel grants the quota once per period, so such
    work can run at full speed within one quota, and no measurement of it is to be trusted."""
    return target_s < GRANULARITY_PERIODS * quota_period(fraction)[1] / 1e6


def blas_env(threads: int, core: str | None = None) -> dict[str, str]:
    """Cap every BLAS/OpenMP flavour numpy may be linked against, so the device model holds (with
    `MALLOC_ENV`, which every process the testbed starts runs with)."""
    env = {**MALLOC_ENV, **dict.fromkeys(BLAS_THREAD_VARS, str(threads))}
    if core:
        env[BLAS_CORE_VAR] = core
    return env
