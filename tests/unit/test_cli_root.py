"""Commands that change the machine refuse to run without root: one line, exit 2, nothing touched."""

from __future__ import annotations

import os
import sys

import pytest

from testbed import cli
from testbed.backends.netns import NetnsHost
from testbed.inventory import DEFAULT_INVENTORY, load_inventory

ROOT_COMMANDS = [
    ["up"],
    ["down"],
    ["shape", "--rate", "20mbit"],
    ["validate", "--rates", "20"],
    ["status"],
    ["exec", "client", "--", "true"],
    ["speed-table"],
    ["calibrate", "--device", "paper-p4"],
    ["sweep", "experiments/smoke.yaml"],
    ["guest", "--", "true"],
]


@pytest.mark.parametrize("argv", ROOT_COMMANDS, ids=lambda a: a[0])
def test_non_root_gets_one_line_and_exit_2(argv, monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.chdir(DEFAULT_INVENTORY.parent)
    assert cli.main(["--inventory", str(DEFAULT_INVENTORY), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "as root" in err and "sudo" not in err, err


def test_host_commands_find_the_projects_python_first():
    inv = load_inventory(DEFAULT_INVENTORY)
    host = NetnsHost(inv.hosts["client"], "tb-client", DEFAULT_INVENTORY.parent)
    path = host.env["PATH"].split(os.pathsep)
    assert path[0] == os.path.dirname(sys.executable)
