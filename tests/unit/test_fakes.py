"""The fake host is strict, like invoke's `MockContext`: whatever nobody scripted raises `Unscripted`,
which is no user error (the code cannot take it for one), and is kept for the check after the test."""

from __future__ import annotations

import subprocess

import pytest

from contracts.agent_api import CpuApply, CpuRead, ServiceStatus, ShapeClear
from contracts.errors import UserError
from testbed.inventory import HostSpec
from tests.fakes import UNSCRIPTED, FakeHost, Unscripted


@pytest.fixture
def host():
    fake = FakeHost(HostSpec(role="client", name="client", address=None))
    yield fake
    for exc in fake.unscripted:  # asked on purpose: not for `nothing_unscripted` to fail on
        UNSCRIPTED.remove(exc)


def test_an_unscripted_agent_verb_raises_naming_the_host_verb_arguments_and_the_script(host):
    host.reply("probe", {}).reply("cpu.read", {})
    with pytest.raises(Unscripted) as exc:
        host.agent(CpuApply(name="tbf-client", quota=0.25))
    message = str(exc.value)
    assert "fake host client" in message and "agent verb cpu.apply" in message
    assert '{"name": "tbf-client", "quota": 0.25}' in message
    assert "scripted: cpu.read, probe" in message
    assert not isinstance(exc.value, UserError)
    assert host.verbs() == ["cpu.apply"]  # recorded all the same
    assert host.unscripted == [exc.value]


def test_an_unscripted_command_raises_naming_its_argv_and_the_scripted_prefixes(host):
    host.on("ethtool", "-k", answer=(0, "tx-checksumming: on\n"))
    assert host.run(["ethtool", "-k", "eth1"]).stdout == "tx-checksumming: on\n"
    with pytest.raises(Unscripted) as exc:
        host.run(["ip", "addr", "add", "10.0.0.1/24", "dev", "eth1"], check=False)
    message = str(exc.value)
    assert 'command ["ip", "addr", "add", "10.0.0.1/24", "dev", "eth1"]' in message
    assert "scripted: ethtool -k" in message
    assert not isinstance(exc.value, UserError)


def test_an_unscripted_process_raises(host):
    with pytest.raises(Unscripted, match=r'process \["python", "-m", "client.worker"\]'):
        host.popen(["python", "-m", "client.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def test_a_scripted_none_and_a_refusal_are_answers(host):
    host.reply("shape.clear", None)

    def refuse(name):
        raise UserError(f"no cgroup {name}", "run testbed up")

    host.reply("cpu.read", refuse)
    assert host.agent(ShapeClear(ifs=("a0",))) is None
    with pytest.raises(UserError, match="on client: no cgroup x"):
        host.agent(CpuRead(name="x"))
    assert host.unscripted == []


def test_an_error_the_code_swallows_is_kept_for_the_check_after_the_test(host):
    """`nothing_unscripted` (tests/unit/conftest.py) fails the test from what the fake kept."""
    try:
        host.agent(ServiceStatus(dir="/run", name="client-offload"))
    except Exception:
        pass  # as careless code might
    (kept,) = host.unscripted
    assert UNSCRIPTED[-1] is kept
    assert (kept.host, kept.what, kept.scripted) == ("client", "agent verb", [])
    assert kept.asked.startswith("service.status ")
