"""A namespace host's agent is resident: one process in the namespace answers every verb, the cgroup's
verbs are answered outside it, a namespace made anew gets a new agent, and nothing outlives close."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from contracts.agent_answers import CpuLimitReading, ShapingInForce
from contracts.agent_api import CpuRead, ServiceStatus, ShapeRead
from testbed.backends.netns import NetnsHost
from testbed.inventory import HostSpec

pytestmark = pytest.mark.privileged


def ip(*argv: str) -> str:
    return subprocess.run(["ip", *argv], check=True, capture_output=True, text=True).stdout


def pids_in(ns: str) -> list[int]:
    return [int(p) for p in ip("netns", "pids", ns).split()]


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def netns():
    """A namespace of this test's own (a unique name), removed with whatever runs in it."""
    if os.geteuid() != 0:
        pytest.skip("privileged: needs root (CI runs as root)")
    name = f"tbag-{uuid.uuid4().hex[:8]}"
    ip("netns", "add", name)
    try:
        yield name
    finally:
        if Path(f"/run/netns/{name}").exists():
            for pid in pids_in(name):
                subprocess.run(["kill", "-9", str(pid)], check=False)
            ip("netns", "delete", name)


def test_one_agent_in_the_namespace_answers_every_verb_and_is_gone_after_close(netns, tmp_path):
    host = NetnsHost(HostSpec("appliance", "appliance", None), netns, tmp_path)
    assert host.agent(ShapeRead(ifs=("lo",))) == {"lo": ShapingInForce(htb=None, netem=None)}
    assert host.agent(ServiceStatus(dir=str(tmp_path), name="none")) is None
    (inside,) = host.agents
    assert inside.starts == 1 and pids_in(netns) == [inside.pid]
    # outside: the cgroup fs is hidden inside
    assert host.agent(CpuRead(name=f"{netns}-none")) == CpuLimitReading()
    (here,) = (link for link in host.agents if link is not inside)
    inside_pid, here_pid = inside.pid, here.pid
    assert here_pid != inside_pid and inside.starts == 1 and pids_in(netns) == [inside_pid]
    host.close()
    assert gone(inside_pid) and gone(here_pid) and pids_in(netns) == []


def test_a_namespace_made_anew_gets_a_new_agent(netns, tmp_path):
    host = NetnsHost(HostSpec("appliance", "appliance", None), netns, tmp_path)
    try:
        host.agent(ShapeRead(ifs=("lo",)))
        (old,) = host.agents
        old_pid = old.pid
        ip("netns", "delete", netns)  # the namespace lives on while its agent does; the name is free
        ip("netns", "add", netns)
        assert host.agent(ShapeRead(ifs=("lo",))) == {"lo": ShapingInForce(htb=None, netem=None)}
        assert gone(old_pid)
        (new,) = host.agents
        assert pids_in(netns) == [new.pid] != [old_pid]
    finally:
        host.close()
    assert pids_in(netns) == []
