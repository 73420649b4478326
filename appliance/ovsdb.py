"""Bridge, port and interface state read from OVSDB through Open vSwitch's Python IDL.

The IDL keeps a replica of the tables we register and fills it from the database's JSON-RPC
stream; one snapshot is taken and the connection closed. ovs-vswitchd writes interface statistics
into the database every `stats-update-interval` (5 s by default, and never more often), so these
counters may lag by that much; the HTB counters of the shaper (`Shaper.counters`) are exact.
"""

from __future__ import annotations

import time
from pathlib import Path

import ovs.db.idl
import ovs.poller

from contracts.errors import UserError

# the per-interface statistics a run keeps (OVSDB has more, e.g. per-size histograms on DPDK)
STATISTICS = (
    "rx_bytes",
    "rx_packets",
    "rx_dropped",
    "rx_errors",
    "tx_bytes",
    "tx_packets",
    "tx_dropped",
    "tx_errors",
)


def bridge_snapshot(bridges: list, bridge: str) -> dict | None:
    """{name, datapath_type, ports, interfaces: {name: {statistic: n}}} of `bridge` from IDL rows.

    Takes the rows (anything with the IDL's attribute names), so captured rows test it without OVS.
    """
    for row in bridges:
        if row.name != bridge:
            continue
        interfaces = {}
        for port in row.ports:
            for iface in port.interfaces:
                stats = dict(iface.statistics)
                interfaces[iface.name] = {k: int(stats[k]) for k in STATISTICS if k in stats}
        return {
            "name": row.name,
            "datapath_type": row.datapath_type or None,
            "ports": sorted(p.name for p in row.ports if p.name != bridge),
            "interfaces": interfaces,
        }
    return None


def read_bridge(remote: str, bridge: str, schema: Path, timeout: float = 10.0) -> dict | None:
    """The bridge as OVSDB has it now (None: no such bridge); `remote` is e.g. unix:/run/x/db.sock."""
    helper = ovs.db.idl.SchemaHelper(location=str(schema))
    helper.register_columns("Bridge", ["name", "datapath_type", "ports"])
    helper.register_columns("Port", ["name", "interfaces"])
    helper.register_columns("Interface", ["name", "statistics"])
    idl = ovs.db.idl.Idl(remote, helper)
    try:
        seqno = idl.change_seqno
        deadline = time.monotonic() + timeout
        while True:
            idl.run()
            if idl.change_seqno != seqno:  # the initial contents have arrived
                break
            if time.monotonic() > deadline:
                raise UserError(
                    f"no answer from the Open vSwitch database at {remote} within {timeout:g} s",
                    "is the testbed up? `testbed status` shows it",
                )
            poller = ovs.poller.Poller()
            idl.wait(poller)
            poller.timer_wait(100)
            poller.block()
        return bridge_snapshot(list(idl.tables["Bridge"].rows.values()), bridge)
    finally:
        idl.close()
