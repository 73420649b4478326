"""The orchestrator's end of the resident agent, without root: real processes on this machine, the
real agent or small scripts that misbehave the ways an agent can (dies, hangs, garbles, never starts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from contracts.errors import AgentBug, CommandError, UserError
from testbed.backends.agent_link import AgentLink, local_spawn
from testbed.backends.host import agent_answer
from tests.helpers import AGENT, REPO

READY = 'import json, os, sys; print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)\n'


@pytest.fixture
def links():
    """Links made by a test, closed after it whatever happens."""
    made: list[AgentLink] = []

    def make(argv: list[str]) -> AgentLink:
        made.append(AgentLink("h", argv, local_spawn(argv)))
        return made[-1]

    yield make
    for link in made:
        link.close()


def script(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def gone(pid: int, within: float = 10.0) -> bool:
    """The process has exited (a zombie not yet reaped by its parent counts as exited)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def ask(link: AgentLink, verb: str, timeout: float = 30.0, **args):
    return agent_answer(link.host, link.ask(verb, json.dumps(args), timeout))


def test_one_agent_answers_every_verb_and_ends_when_closed(links):
    link = links(AGENT)
    assert ask(link, "cpu.read", name="tbt-unit-none") == {}
    pid = link.pid
    assert ask(link, "service.status", dir="/nonexistent", name="x") is None
    assert link.pid == pid and link.starts == 1 and link.running
    result = link.ask("cpu.read", json.dumps({"name": "tbt-unit-none"}), 30.0)
    assert result.argv == [*AGENT, "cpu.read"]
    link.close()
    assert not link.running and gone(pid)


def test_a_bug_in_a_verb_comes_back_with_the_remote_traceback(links):
    link = links(AGENT)
    with pytest.raises(AgentBug) as exc:
        ask(link, "shape.read", wrong=1)
    assert not isinstance(exc.value, UserError) and exc.value.verb == "shape.read"
    assert "Traceback" in str(exc.value) and "unexpected keyword argument 'wrong'" in str(exc.value)
    assert ask(link, "cpu.read", name="tbt-unit-none") == {} and link.starts == 1  # still the same agent


def test_an_agent_found_dead_is_started_again_for_the_next_verb(links):
    link = links(AGENT)
    ask(link, "cpu.read", name="tbt-unit-none")
    first = link.pid
    os.kill(first, signal.SIGKILL)
    assert gone(first)
    assert ask(link, "cpu.read", name="tbt-unit-none") == {}
    assert link.starts == 2 and link.pid != first


def test_an_agent_that_dies_during_a_verb_is_a_bug_with_its_stderr(links):
    link = links(script(READY + "sys.stdin.readline(); print('segfault, say', file=sys.stderr); sys.exit(3)"))
    with pytest.raises(AgentBug, match=r"(?s)counters.*exited with 3.*segfault, say") as exc:
        ask(link, "counters")
    assert not isinstance(exc.value, UserError)
    with pytest.raises(AgentBug):  # a new agent, the same fate: reported each time, never hung
        ask(link, "counters")
    assert link.starts == 2


def test_an_answer_that_is_not_one_is_a_bug(links):
    link = links(script(READY + "sys.stdin.readline(); print('garbage', flush=True); sys.stdin.readline()"))
    with pytest.raises(AgentBug, match="not an answer.*garbage"):
        ask(link, "counters")


def test_a_verb_past_its_timeout_stops_its_agent(links):
    link = links(script(READY + "import time; sys.stdin.readline(); time.sleep(60)"))
    start = time.monotonic()
    with pytest.raises(UserError, match="counters did not finish within 0.5 s"):
        ask(link, "counters", timeout=0.5)
    assert time.monotonic() - start < 10 and not link.running and gone(link.pid)


def test_a_verb_interrupted_is_never_answered_to_the_next(links, monkeypatch):
    link = links(AGENT)
    ask(link, "cpu.read", name="tbt-unit-none")
    first = link.pid

    def interrupted(verb, timeout):
        raise KeyboardInterrupt

    monkeypatch.setattr(link, "_read", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ask(link, "service.status", dir="/nonexistent", name="x")
    monkeypatch.undo()
    assert not link.running and gone(first)
    assert ask(link, "cpu.read", name="tbt-unit-none") == {} and link.starts == 2


def test_what_a_shell_prints_before_the_agent_is_ready_is_skipped(links):
    link = links(script("print('Welcome to the lab', flush=True)\n" + READY + "sys.stdin.readline()\n"
                        "print(json.dumps({'ok': True, 'result': 7}), flush=True); sys.stdin.readline()"))  # fmt: skip
    assert ask(link, "counters") == 7


def test_a_host_without_the_interpreter_is_the_users_to_fix(links):
    with pytest.raises(UserError, match="cannot start the host agent"):
        ask(links(["/nonexistent/python3", "-m", "agent", "--serve"]), "probe")
    not_found = ["sh", "-c", "echo 'env: python9: No such file or directory' >&2; exit 127"]
    with pytest.raises(CommandError, match="python9") as exc:
        ask(links(not_found), "probe")
    assert "inventory" in exc.value.fix
    with pytest.raises(CommandError, match="No module named 'no_such_module_x'"):
        ask(links(script("import no_such_module_x")), "probe")


def test_an_agent_that_fails_at_its_start_otherwise_is_a_bug(links):
    with pytest.raises(AgentBug, match="(?s)start.*ZeroDivisionError"):
        ask(links(script("1 / 0")), "probe")
    with pytest.raises(AgentBug, match="not `ready`"):
        ask(links(script("print('{\"hello\": 1}', flush=True); import time; time.sleep(30)")), "probe")
    with pytest.raises(AgentBug, match="project's own code"):  # a module renamed or left out: ours
        ask(links(script("import client.no_such_module")), "probe")


ORCHESTRATOR = """
import json, sys, time
from testbed.backends.agent_link import AgentLink, local_spawn
from testbed.backends.agent_link import local_spawn
from tests.helpers import AGENT
link = AgentLink("h", AGENT, local_spawn(AGENT))
link.ask("cpu.read", json.dumps({"name": "tbt-unit-none"}), 30.0)
print(link.pid, flush=True)
if sys.argv[1] == "hang":
    time.sleep(60)
"""


@pytest.mark.parametrize("end", ["exit", "hang"])
def test_an_agent_never_outlives_its_orchestrator(end):
    """An orchestrator that exits closes its agents; one that is killed leaves them EOF, and they go."""
    orchestrator = subprocess.Popen(
        [sys.executable, "-c", ORCHESTRATOR, end], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        pid = int(orchestrator.stdout.readline())
        if end == "hang":
            orchestrator.kill()
        assert orchestrator.wait(timeout=30) in (0, -signal.SIGKILL)
        assert gone(pid)
    finally:
        orchestrator.kill()
        orchestrator.wait()
