"""A trial's stages and names: what a trial is called, measured and written as, on every host and in the
analysis (the stage schema: `STAGES`; the methods, servers and stacks; the `Server-Timing` format).

`trials.csv` (its record and format: `contracts.run`) and the analysis that reads it agree through
these names; the server's stage times reach the client in the standard
`Server-Timing` header, whose format is written and parsed here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from enum import StrEnum

LOCAL = "local"  # the method of a local-baseline trial (no offloading, no rate)
DTYPES = ("float64", "int32", "int64")  # what operands may be; every codec checks against this
# The text the JSON codecs (json, ujson) write: this project's compact text, or the era's as the
# paper's software wrote it (Python 3.5's json: ", " and ": "; ujson 1.35: floats to 10 decimals).
# Both decode alike; `contracts.codecs.get_codec` picks the writer, `X-Codec-Text` asks the server.
COMPACT, ERA = "compact", "era"
CODEC_TEXTS = (COMPACT, ERA)
# Methods that are a transport of their own rather than a codec over HTTP, and the codec each one
# marshals with (a sweep's methods are the codecs' names and these).
GRPC = "grpc"  # the method that offloads over gRPC (offload.v1.Offload/Execute) instead of HTTP
TRANSPORTS = {GRPC: "protobuf"}
# The gRPC offload servers, one per language behind the same contract (contracts/offload.proto):
# Python (NumPy), C++ (Eigen), Go (plain loops), Java (Apache Commons Math) and Ruby (its standard
# `matrix`). Each listens on the server's gRPC port plus its index here, so a port names one language
# whichever of them run.
GRPC_SERVERS = ("python", "cpp", "go", "java", "ruby")


PYTHON = "python"  # the server of every HTTP method, and the default gRPC server
# The tagless transport's servers (contracts.tagless: the lightweight-RPC study's service), Python's
# on the server's tagless port and C++'s on the next: a testbed runs Python's, and C++'s beside it
# when its servers include cpp (`tagless_servers`).
TAGLESS = "tagless"
TAGLESS_SERVERS = (PYTHON, "cpp")


def tagless_port(base: int, server: str) -> int:
    """The port of `server`'s tagless transport, for the tagless port `base` (Python's)."""
    return base + TAGLESS_SERVERS.index(server)


def tagless_servers(servers) -> tuple[str, ...]:
    """The tagless servers of a testbed running the gRPC `servers`: Python's always, and each other
    language of them that has one."""
    return tuple(s for s in TAGLESS_SERVERS if s == PYTHON or s in servers)


def grpc_port(base: int, server: str) -> int:
    """The port of `server`'s gRPC transport, for the gRPC port `base` (Python's)."""
    return base + GRPC_SERVERS.index(server)


def offloads(methods, servers=(PYTHON,), op: str | None = None) -> list[tuple[str, str]]:
    """A sweep's ways to offload, (method, server), in order: the gRPC method once per server, every
        HTTP method on the Python server (the one HTTP server); the tagless transport (an RPC study's) once
    per server, as gRPC. With `op`, those of that op: only the
        servers that have it (`serves`)."""
    ways = [(m, s) for m in methods for s in (servers if m in (GRPC, TAGLESS) else (PYTHON,))]
    return ways if op is None else [(m, s) for m, s in ways if serves(s, op)]


def serves(server: str, op: str) -> bool:
    """Whether a server has an op: every server has the matrix ops, and the image ops of its own
    (`contracts.images.SERVER_OPS`: Go's and Ruby's filter gray only). The embedded study's grid is
    such: its matrices went to five servers, its three filters to the OpenCV ones."""
    from contracts.images import SERVER_OPS, is_image_op  # numpy: only when an op is asked about

    return not is_image_op(op) or op in SERVER_OPS.get(server, ())


def unserved(ops, methods, servers) -> str:
    """The ops a sweep's gRPC servers leave out, in words ('filters3 not on go, ruby'); '' if none."""
    if GRPC not in methods:
        return ""
    parts = [(op, [s for s in servers if not serves(s, op)]) for op in ops]
    return "; ".join(f"{op} not on {', '.join(lacking)}" for op, lacking in parts if lacking)


# what an offload label appends for the clients offloading at once (`raw-x4`) and the transfer
# settings (`raw-p4`: over 4 connections; `raw-io64`: in writes of 64 KiB)
SETTING_MARKS = {"clients": "-x", "parallelism": "-p", "io_kb": "-io", "concurrency": "-c"}
_SETTINGS = re.compile(f"({'|'.join(SETTING_MARKS.values())})(\\d+)")
_CLIENTS = re.compile(f"{SETTING_MARKS['clients']}(\\d+)")
# what an offload label ends with when the sweep's clients are of several devices (`raw-x2 on
# paper-p4`): last, after the settings marks, and apart from them, so a device name with a mark's look
# (`paper-p4` holds `-p4`) is never read as a setting. Methods, servers and device names have no spaces.
DEVICE_MARK = " on "


def offload_label(
    method: str,
    server: str | None,
    clients: int | None = None,
    parallelism: int | None = None,
    io_kb: int | None = None,
    concurrency: int | None = None,
    *,
    device: str | None = None,
) -> str:
    """How the analysis names a way to offload: the method, with its server when that is not Python
    (`grpc@cpp`), with several clients how many offloaded at once (`raw-x4`: raw, four clients at
    once), the transfer settings a sweep varied (`raw-p4`: over 4 connections; `raw-io64`: in
    writes of 64 KiB; `raw-c4`: four requests outstanding per client), and with clients of several
    devices the device it ran as (`raw-x2 on paper-p4`), so every table and figure compares them as it
    compares methods. A row without a server (local, or a run before servers) is the method alone;
    a local row stays `local` (its device is in its own column, `on_device` names its baseline)."""
    label = method if server in (None, "", PYTHON) else f"{method}@{server}"
    if method == LOCAL:
        return label
    settings = (
        ("clients", clients),
        ("parallelism", parallelism),
        ("io_kb", io_kb),
        ("concurrency", concurrency),
    )
    for key, value in settings:
        if value is not None:
            label += f"{SETTING_MARKS[key]}{value}"
    return on_device(label, device)


def on_device(label: str, device: str | None) -> str:
    """`label` as run on `device` (`raw on paper-p4`, `local on paper-p4`); the label itself without a
    device (None or empty: the sweep's clients were of one device)."""
    return f"{label}{DEVICE_MARK}{device}" if device else label


def label_device(label: str) -> str | None:
    """The client device of an offload label (`raw-x2 on paper-p4` -> `paper-p4`; None: one device)."""
    return label.partition(DEVICE_MARK)[2] or None


def label_without_device(label: str) -> str:
    """An offload label without its device: `raw-x2 on paper-p4` -> `raw-x2`."""
    return label.partition(DEVICE_MARK)[0]


def label_clients(label: str) -> int | None:
    """How many clients offloaded at once in an offload label (`raw-x4` -> 4; None: one client)."""
    m = _CLIENTS.search(label_without_device(label))
    return int(m.group(1)) if m else None


def label_without_clients(label: str) -> str:
    """An offload label without its number of clients: `raw-x4-p2` -> `raw-p2`, `raw-x2 on paper-p4` ->
    `raw on paper-p4` (its device kept: the same way to offload on another device is another one)."""
    return on_device(_CLIENTS.sub("", label_without_device(label)), label_device(label))


def label_base(label: str) -> str:
    """An offload label without its clients, transfer settings and device: `raw-x4-p2 on paper-p4` ->
    `raw`."""
    return _SETTINGS.sub("", label_without_device(label))


def label_server(label: str) -> str:
    """The server of an offload label (`grpc@cpp` -> `cpp`; a method alone ran on Python's)."""
    return label_base(label).partition("@")[2] or PYTHON


# How a remote trial reaches the server, alike for HTTP and gRPC: a new TCP connection per trial
# (its handshake counted in communication, as the multi-language study did: "one connection was
# opened for each remote processing") or one connection kept for the whole sweep.
PER_TRIAL, PERSISTENT = "per-trial", "persistent"
CONNECTIONS = (PER_TRIAL, PERSISTENT)


def method_codec(method: str) -> str:
    """The codec a method (or its offload label, `grpc@cpp`) marshals with: itself, or its
    transport's (`grpc` -> `protobuf`)."""
    method = label_base(method).partition("@")[0]
    return TRANSPORTS.get(method, method)


# The stages of a remote trial, in the order they happen (the paper's Fig. 3); seconds.
STAGES = (
    "t_client_encode",
    "t_comm",
    "t_server_decode",
    "t_server_compute",
    "t_server_encode",
    "t_client_decode",
)
# The server's own stages, as named in `Server-Timing`, and the trial column each one fills.
SERVER_STAGES = {"decode": "t_server_decode", "compute": "t_server_compute", "encode": "t_server_encode"}
# The cgi stack's per-request process start-up (interpreter and imports), in `Server-Timing` as
# `server_start` and in trials.csv as `t_server_start` (its `cpu=` as `cpu_server_start`). It is not
# one of STAGES: it happens inside the POST, and communication includes it (the paper's definition:
# the POST time minus the server's probed stages); the analysis also shows communication without it
# (`t_comm_net`, docs/analysis.md).
SERVER_START = "server_start"
# The wait of a request whose body has arrived for one of the server's work slots (`python -m server
# --work-slots W`: W requests decode, compute and encode at once), in `Server-Timing` as `queue` and
# in trials.csv as `t_server_queue`: server time, not network, so communication excludes it. With one
# client it is ~0; with several offloading at once it is the server's queueing.
SERVER_QUEUE = "queue"
# The server's waits for the host-wide CPU lock before its stages (replicas on one host:
# `contracts.cpu_lock`), summed, in `Server-Timing` as `cpulock`: another testbed's timed stage held
# the machine, and this request's body was in and its reply not yet begun, so the wait is neither
# network nor the device's work, and communication and the completion time exclude it. Measured in
# issue 25's check (four testbeds on the 2-core VM): mul 400 RAW's network time at 100 Mbit/s was 0.56
# s (+-0.18) with the waits in it against 0.32 s (+-0.002) on one testbed, its server's decode
# waiting behind another testbed's 0.6 s JSON decode of mul 800. Every server reports it (Python's
# HTTP, CGI and gRPC, and the C++, Go, Java and Ruby gRPC servers), only when a lock is named.
SERVER_LOCK_WAIT = "cpulock"
# The server's time spent running a stage's work again to time it (`contracts.short_work`: a scaled
# server device's short stages and stages of milliseconds), summed, in `Server-Timing` as `retime`:
# the stage's own run is over and its reply not yet sent, so the time is neither network nor the
# device's work: the request's time (`t_request`) leaves it out, and so communication and the
# completion time.
# A request asks for it with `RETIME_HEADER: 1` (gRPC: the same name, lower-cased, as metadata);
# without it the server times each stage's one run (a server no scaled device follows need not pay).
SERVER_RETIME = "retime"
RETIME_HEADER = "X-Retime"


# With it, the client may say what it expects of each kind of work (`1; decode=S; kernel=S; start=S`:
# this host's recent CPU seconds for the same work, the scaled server device's reference), so that
# the server takes a figure far above it again (`contracts.short_work.per_run_cpu_s`'s `expected_s`).
RETIME_KINDS = ("decode", "kernel", "encode", "start")  # start: the cgi stack's process start-up


def retime_value(expected: Mapping[str, float] | None = None) -> str:
    """`RETIME_HEADER`'s value: a request to time the stages again, with the CPU seconds expected of
    each kind of work (`RETIME_KINDS`) that has them."""
    parts = [f"{kind}={expected[kind]:.9g}" for kind in RETIME_KINDS if expected and kind in expected]
    return "; ".join(["1", *parts])


def asks_retime(headers: Mapping[str, str]) -> bool:
    """Whether a request's headers (HTTP's, CGI's or gRPC's metadata, looked up as given and
    lower-cased) ask the server to time its stages' work again."""
    return _retime_parts(headers)[:1] == ["1"]


def retime_expected(headers: Mapping[str, str]) -> dict[str, float]:
    """The CPU seconds a request's `RETIME_HEADER` expects of each kind of work: positive, finite,
    of `RETIME_KINDS`; nothing at all when any part is otherwise (the stages are then timed again
    without a reference, as a bare `1` asks: a wrong figure from the wire must not make the server
    run a stage's work more than its `RETRIES`, and never does)."""
    parts = _retime_parts(headers)
    if parts[:1] != ["1"] or len(parts) > 1 + len(RETIME_KINDS):
        return {}
    expected: dict[str, float] = {}
    for part in parts[1:]:
        kind, _, value = part.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            return {}
        if kind not in RETIME_KINDS or kind in expected or not (0 < seconds < math.inf):
            return {}
        expected[kind] = seconds
    return expected


def _retime_parts(headers: Mapping[str, str]) -> list[str]:
    value = headers.get(RETIME_HEADER, headers.get(RETIME_HEADER.lower(), ""))
    return [part.strip() for part in value.split(";", 1 + len(RETIME_KINDS))]


# A paced stage's own time on the server's host, in `Server-Timing` as its `host=` parameter (`python -m
# server --pace PROFILE`: every stage lasts at least its work's time on the server's device, so `dur`
# is the device's time and `host` what this host took of it).
# How the server runs requests: `wsgi` (Flask under gunicorn, long-lived) or `cgi` (lighttpd, a fresh
# Python process per request, as the paper's server did). gRPC is a long-lived server on both.
class Stack(StrEnum):
    """The offload server's HTTP stack: a long-lived gunicorn (wsgi), or lighttpd with a fresh Python
    process per request (cgi), as the paper's server."""

    WSGI = "wsgi"
    CGI = "cgi"


SERVER_STACKS = tuple(Stack)

_METRIC = re.compile(r"^\s*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)\s*(?:;(.*))?$")
_PARAM = re.compile(r"^\s*(dur|cpu|host)\s*=\s*\"?([0-9.eE+\-]+)\"?\s*$")


def format_server_timing(
    ms: dict[str, float], cpu_ms: dict[str, float] | None = None, host_ms: dict[str, float] | None = None
) -> str:
    """{"decode": 1.5, "compute": 20.0} (milliseconds, the header's unit) -> `decode;dur=1.500000, ...`;
    with `cpu_ms`, each stage's CPU time too, as an extension parameter: `decode;dur=1.5;cpu=1.41`;
    with `host_ms`, a paced stage's own time on the host: `compute;dur=300;cpu=20.1;host=20.4`.
    Nanoseconds (6 decimals of a millisecond): RAW's server stages are a few microseconds of CPU here,
    which 3 decimals rounded to whole microseconds (up to 7% of a 7 us decode) before the device's
    slowdown of ~500 multiplied them."""
    cpu_ms, host_ms = cpu_ms or {}, host_ms or {}
    return ", ".join(
        f"{name};dur={value:.6f}"
        + (f";cpu={cpu_ms[name]:.6f}" if name in cpu_ms else "")
        + (f";host={host_ms[name]:.6f}" if name in host_ms else "")
        for name, value in ms.items()
    )


def parse_server_timing(value: str | None, param: str = "dur") -> dict[str, float]:
    """`decode;dur=1.5, compute;dur=20` -> {"decode": 0.0015, "compute": 0.02} (seconds); with
    `param="cpu"`, the stages' CPU times (what a server device's scaled mode scales); with
    `param="host"`, a paced stage's own time on the host.

    Follows the header's grammar loosely: metrics without the parameter and other parameters (`desc`)
    are skipped; a malformed metric is skipped rather than failing a trial whose result is fine.
    """
    out: dict[str, float] = {}
    for metric in (value or "").split(","):
        m = _METRIC.match(metric)
        if not m:
            continue
        for part in (m.group(2) or "").split(";"):
            p = _PARAM.match(part)
            if p and p.group(1) == param:
                try:
                    out[m.group(1)] = float(p.group(2)) / 1000.0
                except ValueError:
                    pass
                break
    return out
