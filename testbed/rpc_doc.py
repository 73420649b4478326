"""An RPC study's experiment file: `rpc:` (calls, operations) in place of ops and sizes (docs/rpc-study.md).

`calls` is a trial's batch: one count (the study's 1000), or one per rate, so that a slow link's
trials stay short (`{none: 1000, 100: 1000, 10: 100}`: at 10 Mbit/s 1000 calls of LargeData8192 move
130 MB and take 100 s or more); the analysis compares calls per call, and gives the study's figure,
the time of 1000 calls, from them."""

from __future__ import annotations

from contracts.config import Section
from contracts.errors import UserError
from contracts.grid import parse_rates
from contracts.rpc_study import DEFAULT_CALLS, MAX_CALLS, RPC_TRANSPORTS, parse_operations


def rpc_doc(doc: Section) -> Section:
    """An RPC study's file (`rpc: {calls: 1000, operations: {Average: [10, 10000], ...}}`): its ops are
    the operations, each at its own sizes (`op_sizes`), its methods the transports (default both), no
    local baseline (a call has no local counterpart to decide against); ops and sizes are not given."""
    rpc = doc.section("rpc")
    rpc.reject_unknown({"calls", "operations"})
    for key in ("ops", "sizes", "local", "datasets"):
        if doc.has(key):
            raise doc.error(key, "an RPC study's ops and sizes are its operations'", f"drop {key}")
    calls = rpc.raw("calls", DEFAULT_CALLS)
    by_rate = calls if isinstance(calls, dict) else {}
    try:
        calls_at = {parse_rates([rate], "rpc.calls")[0]: n for rate, n in by_rate.items()}
    except UserError as exc:
        raise rpc.error("calls", exc.message.split(": ", 1)[-1], exc.fix) from None
    counts = list(calls_at.values()) if by_rate else [calls]
    if not counts or not all(
        isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_CALLS for n in counts
    ):
        raise rpc.error(
            "calls",
            f"{calls!r} is not a count of calls (or a mapping of rates to counts)",
            f"give 1 to {MAX_CALLS}, e.g. 1000, or {{none: 1000, 100: 1000, 10: 100}}",
        )
    try:
        operations = parse_operations(rpc.raw("operations"))
    except UserError as exc:
        raise rpc.error("operations", exc.message.split(": ", 1)[-1], exc.fix) from None
    data = {k: v for k, v in doc.data.items() if k != "rpc"}
    data.update(ops=list(operations), local=False, calls=max(counts))
    data["calls_at"] = sorted(calls_at.items())
    data["op_sizes"] = {op: list(sizes) for op, sizes in operations.items()}
    data["sizes"] = sorted({n for sizes in operations.values() for n in sizes})
    data.setdefault("methods", list(RPC_TRANSPORTS))
    return Section(doc.path, doc.what, doc.keys, data, doc.node)
