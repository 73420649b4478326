"""`python -m testbed.probe`: what a remote host has, as JSON, so `up` can list every problem at once."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

PYTHON_MODULES = ("numpy", "flask", "gunicorn", "requests", "pyroute2", "iperf3", "yaml", "ujson", "orjson")


def probe(programs: list[str], interfaces: list[str], cgroup: bool) -> dict:
    out = {
        "root": os.geteuid() == 0,
        "programs": {p: shutil.which(p) for p in programs},
        "interfaces": {i: Path(f"/sys/class/net/{i}").exists() for i in interfaces},
        "python_modules": {m: importlib.util.find_spec(m) is not None for m in PYTHON_MODULES},
        "ovs_kernel_module": Path("/sys/module/openvswitch").exists(),
        "system_ovs": Path("/var/run/openvswitch/db.sock").exists(),
        "tun": Path("/dev/net/tun").exists(),
    }
    if cgroup:
        from client.cpulimit import detect_version
        from contracts.errors import UserError

        try:
            out["cgroup"] = detect_version()
        except UserError as exc:
            out["cgroup"] = None
            out["cgroup_error"] = exc.message
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.probe")
    parser.add_argument("--programs", default="")
    parser.add_argument("--interfaces", default="")
    parser.add_argument("--cgroup", action="store_true")
    args = parser.parse_args(argv)
    split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    json.dump(probe(split(args.programs), split(args.interfaces), args.cgroup), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
