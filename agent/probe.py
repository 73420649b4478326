"""What a host has, so `up` can list every problem on every host at once, before changing anything."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from client.cpulimit import detect_version
from contracts.agent_answers import ProbeReport
from contracts.errors import UserError

# what the roles import on a host (the orchestrator's own dependencies are not needed there)
PYTHON_MODULES = (
    "numpy",
    "flask",
    "gunicorn",
    "requests",
    "pyroute2",
    "iperf3",
    "ujson",
    "orjson",
    "msgpack",
    "google.protobuf",
    "grpc",
    "ovs",
)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing (google.protobuf)
        return False


def probe(programs: list[str], interfaces: list[str], cgroup: bool) -> ProbeReport:
    out: dict = {
        "root": os.geteuid() == 0,
        "programs": {p: shutil.which(p) for p in programs},
        "interfaces": {i: Path(f"/sys/class/net/{i}").exists() for i in interfaces},
        "python_modules": {m: _installed(m) for m in PYTHON_MODULES},
        "ovs_kernel_module": Path("/sys/module/openvswitch").exists(),
        "ovs_schema": Path("/usr/share/openvswitch/vswitch.ovsschema").exists(),
        "system_ovs": Path("/var/run/openvswitch/db.sock").exists(),
        "tun": Path("/dev/net/tun").exists(),
    }
    if cgroup:
        try:
            out["cgroup"] = detect_version()
        except UserError as exc:
            out["cgroup"] = None
            out["cgroup_error"] = exc.message
    return ProbeReport(**out)
