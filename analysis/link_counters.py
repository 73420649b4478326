"""Bytes on the wire next to the payload: what the appliance counted around each rate's trials.

The sweep records the appliance's counters (`manifest.json` key `counters`) just before and just
after the trials of each rate, with the ids of the trials run in between, as Flent records qdisc
statistics around a test. The HTB class counters are exact; Open vSwitch writes its interface
statistics to OVSDB every 5 s, so its drop counts may miss the last few seconds of a rate.

Per rate and direction: the payload (the marshalled request or response bodies of those trials,
`bytes_up`/`bytes_down`), the bytes and packets that left the appliance's shaped port (Ethernet
frames: HTTP and TCP/IP headers, handshakes and the other direction's ACKs included), their ratio,
and what was dropped. A ratio near 1 means the link carried little besides the payload.
"""

from __future__ import annotations

import pandas as pd

from contracts.run import Manifest

COLUMNS = [
    "rate_mbps",
    "direction",
    "port",
    "trials",
    "payload_bytes",
    "wire_bytes",
    "wire_packets",
    "wire_per_payload",
    "htb_drops",
    "htb_overlimits",
    "ovs_dropped",
]
DIRECTIONS = (("up", "bytes_up"), ("down", "bytes_down"))


def _delta(before: dict, after: dict, key: str) -> int:
    return int(after.get(key, 0)) - int(before.get(key, 0))


def link_counters(trials: pd.DataFrame, manifest: Manifest | None) -> pd.DataFrame:
    """One row per recorded rate and direction (empty when the run recorded no counters)."""
    rows = []
    by_trial = trials.set_index("trial") if "trial" in trials.columns else None
    for record in manifest.counters if manifest else []:
        before, after = record.before, record.after
        if not before or not after:  # a session that stopped mid-rate: no after, no delta
            continue
        ids = [i for i in record.trials if by_trial is not None and i in by_trial.index]
        ran = by_trial.loc[ids] if ids else None
        for direction, payload_column in DIRECTIONS:
            port = record.ports[direction]
            htb_b, htb_a = before["htb"].get(port, {}), after["htb"].get(port, {})
            ovs_b, ovs_a = before["ovs"].get(port, {}), after["ovs"].get(port, {})
            payload = 0
            if ran is not None and payload_column in ran.columns:
                payload = int(pd.to_numeric(ran[payload_column], errors="coerce").fillna(0).sum())
            wire = _delta(htb_b, htb_a, "bytes")
            rows.append(
                {
                    "rate_mbps": record.rate_mbps,
                    "direction": direction,
                    "port": port,
                    "trials": len(ids),
                    "payload_bytes": payload,
                    "wire_bytes": wire,
                    "wire_packets": _delta(htb_b, htb_a, "packets"),
                    "wire_per_payload": round(wire / payload, 4) if payload else None,
                    "htb_drops": _delta(htb_b, htb_a, "drops"),
                    "htb_overlimits": _delta(htb_b, htb_a, "overlimits"),
                    "ovs_dropped": _delta(ovs_b, ovs_a, "tx_dropped") + _delta(ovs_b, ovs_a, "rx_dropped"),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)
