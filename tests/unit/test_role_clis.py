"""The role CLIs that exec a command take their options before `--` and the command after it."""

from __future__ import annotations

import json

import pytest

from client import cpulimit
from contracts.command import split_command
from testbed import service


def test_split_command():
    assert split_command(["start", "--dir", "d", "--name", "n", "--", "iperf3", "-s", "--", "x"]) == (
        ["start", "--dir", "d", "--name", "n"],
        ["iperf3", "-s", "--", "x"],
    )
    assert split_command(["read", "--name", "n"]) == (["read", "--name", "n"], [])


def test_cpulimit_options_before_the_command(capsys):
    assert cpulimit.main(["read", "--name", "tbt-unit-no-such-cgroup"]) == 0
    assert json.loads(capsys.readouterr().out) == {}


def test_exec_without_a_command_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        cpulimit.main(["exec", "--name", "tbt-unit"])
    with pytest.raises(SystemExit):
        service.main(["start", "--dir", str(tmp_path), "--name", "x"])


def test_service_lifecycle(tmp_path):
    assert service.main(["start", "--dir", str(tmp_path), "--name", "sleeper", "--", "sleep", "30"]) == 0
    assert service.main(["pid", "--dir", str(tmp_path), "--name", "sleeper"]) == 0
    assert service.main(["stop", "--dir", str(tmp_path), "--name", "sleeper"]) == 0
    assert service.main(["pid", "--dir", str(tmp_path), "--name", "sleeper"]) == 1
