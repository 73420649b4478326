"""Parsers on real output captured from a running testbed (tests/data/captured/), without root.

iperf3's JSON result (what `validate` trusts the link by), an HTB class as the kernel sends it over
netlink with `tc -s` of the same class taken at the same moment, and the OVSDB rows of the bridge as
the IDL replicates them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from appliance.ovsdb import STATISTICS, bridge_snapshot
from appliance.shaper import class_counters
from contracts.units import expected_goodput
from testbed.link.validate import parse_iperf3

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "captured"


@pytest.mark.parametrize(
    ("direction", "goodput", "retransmits"),
    [("up", 86_799_241.8152768, 1219), ("down", 91_286_945.5030421, 206)],
)
def test_iperf3_receiver_goodput_and_sender_retransmits(direction, goodput, retransmits):
    """2-second runs on a 100 Mbit/s link: the receiver's figure, slow start included (below the
    link's TCP goodput, which is why `validate` omits the first second)."""
    data = json.loads((CAPTURED / f"iperf3-{direction}-100mbit.json").read_text())
    assert parse_iperf3(data) == (pytest.approx(goodput), retransmits)
    assert goodput < expected_goodput(100_000_000)


def test_iperf3_error_result_is_refused():
    with pytest.raises(ValueError, match="unable to connect"):
        parse_iperf3({"start": {}, "error": "unable to connect to server: Connection refused"})


def test_htb_counters_from_netlink_agree_with_tc_s():
    msg = tcmsg(bytes.fromhex((CAPTURED / "htb-class-tbc-a1.netlink.hex").read_text().strip()))
    msg.decode()
    assert msg.get_attr("TCA_KIND") == "htb" and msg["handle"] == 0x10010
    counters = class_counters(msg.get_attr("TCA_STATS2"))
    text = (CAPTURED / "tc-s-class-tbc-a1.txt").read_text()
    sent = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)", text)
    assert sent, text
    assert (counters["bytes"], counters["packets"], counters["drops"], counters["overlimits"]) == tuple(
        int(g) for g in sent.groups()
    )
    assert counters["bytes"] > 0


def _rows(data):
    """The captured rows shaped as the IDL gives them: attributes, ports and interfaces as rows."""
    return [
        SimpleNamespace(
            name=b["name"],
            datapath_type=b["datapath_type"],
            ports=[
                SimpleNamespace(name=p["name"], interfaces=[SimpleNamespace(**i) for i in p["interfaces"]])
                for p in b["ports"]
            ],
        )
        for b in data
    ]


def test_bridge_snapshot_from_ovsdb_rows():
    rows = _rows(json.loads((CAPTURED / "ovsdb-bridge-rows.json").read_text()))
    snap = bridge_snapshot(rows, "tbc-br0")
    assert snap["name"] == "tbc-br0" and snap["datapath_type"] == "netdev"
    assert snap["ports"] == ["tbc-a0", "tbc-a1"]  # the bridge's own internal port is not a port of ours
    assert set(snap["interfaces"]["tbc-a0"]) == set(STATISTICS)
    assert snap["interfaces"]["tbc-a0"]["rx_bytes"] > 0
    assert bridge_snapshot(rows, "no-such-bridge") is None
