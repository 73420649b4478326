"""Bytes on the wire against the payload, from counters recorded around a rate's trials."""

from __future__ import annotations

import pandas as pd

from analysis.link_counters import COLUMNS, link_counters
from contracts.run import Counters, Experiment, Manifest

EXP = Experiment("x", ("mul",), (100,), (10.0, 20.0), ("raw",), 3)


def snapshot(up_bytes, down_bytes, up_drops=0, ovs_tx_dropped=0) -> dict:
    return {
        "at": 0.0,
        "htb": {
            "a1": {"bytes": up_bytes, "packets": up_bytes // 1000, "drops": up_drops, "overlimits": 5},
            "a0": {"bytes": down_bytes, "packets": down_bytes // 1000, "drops": 0, "overlimits": 7},
        },
        "ovs": {"a1": {"tx_dropped": ovs_tx_dropped, "rx_dropped": 0}, "a0": {}},
    }


def trials() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "trial": [1, 2, 3, 4],
            "rate_mbps": [10.0, 10.0, 10.0, 20.0],
            "bytes_up": [40_000, 40_000, None, 99],  # trial 3 failed: no body counted
            "bytes_down": [20_000, 20_000, None, 99],
        }
    )


def test_wire_bytes_and_drops_are_deltas_and_payload_is_the_trials_in_between():
    manifest = Manifest(
        "x",
        "complete",
        EXP,
        counters=[
            Counters(
                rate_mbps=10.0,
                ports={"up": "a1", "down": "a0"},
                trials=[1, 2, 3],
                before=snapshot(1_000, 2_000),
                after=snapshot(1_000 + 84_000, 2_000 + 44_000, up_drops=3, ovs_tx_dropped=2),
            ),
            Counters(rate_mbps=20.0, ports={"up": "a1", "down": "a0"}, trials=[4], before=snapshot(0, 0)),
        ],
    )
    table = link_counters(trials(), manifest)
    assert list(table.columns) == COLUMNS
    assert len(table) == 2  # the 20 Mbit/s rate stopped before its `after`: no delta to report
    up, down = table.to_dict("records")
    assert (up["direction"], up["port"], up["trials"]) == ("up", "a1", 3)
    assert (up["payload_bytes"], up["wire_bytes"], up["wire_packets"]) == (80_000, 84_000, 84)
    assert up["wire_per_payload"] == 1.05
    assert (up["htb_drops"], up["htb_overlimits"], up["ovs_dropped"]) == (3, 0, 2)
    assert (down["payload_bytes"], down["wire_bytes"], down["wire_per_payload"]) == (40_000, 44_000, 1.1)


def test_runs_without_counters_give_an_empty_table():
    assert link_counters(trials(), None).empty
    assert link_counters(trials(), Manifest("x", "complete", EXP)).empty
