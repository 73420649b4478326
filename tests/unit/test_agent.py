"""The host agent's protocol and verbs, without root: JSON lines in and out, errors by structure."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys

import pytest

from agent import __main__ as agent_main
from agent import probe as agent_probe
from agent.verbs import VERBS
from appliance.switch import Switch
from client import cpulimit
from contracts.command import Result, split_command
from contracts.errors import AgentBug, CommandError, UserError
from contracts.units import kernel_hz
from testbed.backends.host import agent_answer


def serve(*lines: str) -> list[dict]:
    """The agent's answers to request lines, after its ready line."""
    out = io.StringIO()
    assert agent_main.serve(io.StringIO("".join(f"{line}\n" for line in lines)), out) == 0
    ready, *answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert ready["ready"] is True and isinstance(ready["pid"], int)
    return answers


def ask(verb: str, args: dict) -> dict:
    (answer,) = serve(json.dumps({"verb": verb, "args": args}))
    return answer


def test_split_command():
    assert split_command(["--name", "n", "--", "iperf3", "-s", "--", "x"]) == (
        ["--name", "n"],
        ["iperf3", "-s", "--", "x"],
    )
    assert split_command(["--name", "n"]) == (["--name", "n"], [])


def test_limit_wrapper_without_a_command_is_refused():
    with pytest.raises(SystemExit):
        cpulimit.main(["--name", "tbt-unit"])


def test_anything_but_serve_is_a_usage_error(capsys):
    assert agent_main.main(["shape.read"]) == 64
    assert "--serve" in capsys.readouterr().err


def test_a_request_that_is_not_one_is_answered_as_a_bug_and_the_agent_goes_on():
    answers = serve(
        "{not json",
        "[1, 2]",
        '{"args": {}}',
        '{"verb": "no.such.verb", "args": {}}',
        '{"verb": "shape.read", "args": [1]}',
        '{"verb": "cpu.read", "args": {"name": "tbt-unit-no-such-cgroup"}}',
    )
    assert [a["ok"] for a in answers] == [False] * 5 + [True]
    assert all("bug" in a and "error" not in a for a in answers[:5])
    assert "not JSON" in answers[0]["bug"] and '"verb"' in answers[1]["bug"]
    assert answers[3]["verb"] == "no.such.verb" and "unknown verb" in answers[3]["bug"]
    assert "JSON object" in answers[4]["bug"]


def test_blank_lines_are_not_requests():
    assert serve("", "  ", '{"verb": "cpu.read", "args": {"name": "tbt-unit-none"}}') == [
        {"ok": True, "result": {}}
    ]


def test_shape_plan_is_built_with_this_hosts_kernel_hz():
    link = {"up_rate": 20_000_000, "down_rate": 10_000_000, "mtu": 1500}
    answer = ask("shape.plan", {"link": link, "up_if": "tb-a1", "down_if": "tb-a0"})
    assert answer["ok"]
    up, down = answer["result"]
    assert (up["ifname"], up["direction"], up["rate"]) == ("tb-a1", "up", 20_000_000)
    assert (down["ifname"], down["rate"]) == ("tb-a0", 10_000_000)
    assert up["burst"] == 20_000_000 // 8 // kernel_hz() + 1514
    assert any("htb rate 20mbit" in c for c in up["commands"])


def test_a_user_error_comes_back_with_its_fix():
    link = {"up_rate": 10**6, "down_rate": 10**6}
    answer = ask("shape.apply", {"link": link, "up_if": "tbt-nope1", "down_if": "tbt-nope0"})
    assert answer == {
        "ok": False,
        "verb": "shape.apply",
        "error": "appliance port tbt-nope1 does not exist",
        "fix": "run testbed up first",
    }


def test_a_wrong_call_is_a_bug_with_its_traceback():
    answer = ask("shape.read", {"wrong": 1})
    assert answer["ok"] is False and answer["verb"] == "shape.read" and "error" not in answer
    assert answer["bug"].startswith("Traceback") and "unexpected keyword argument 'wrong'" in answer["bug"]


def test_a_result_that_is_not_json_is_the_verbs_bug(monkeypatch):
    monkeypatch.setitem(VERBS, "cpu.read", lambda request: {1, 2})
    answer = ask("cpu.read", {"name": "x"})
    assert answer["ok"] is False and "not JSON serializable" in answer["bug"]


def test_the_agent_process_answers_through_pipes_until_eof():
    """The real entry point: a request per line, an answer per line, as they come; EOF ends it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert json.loads(proc.stdout.readline()) == {"ready": True, "pid": proc.pid}
        for request, check in (
            (
                {"verb": "cpu.read", "args": {"name": "tbt-unit-none"}},
                lambda a: a == {"ok": True, "result": {}},
            ),
            ({"verb": "shape.read", "args": {"wrong": 1}}, lambda a: "Traceback" in a["bug"]),
            ({"verb": "no.such.verb"}, lambda a: "unknown verb" in a["bug"]),
        ):
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            assert check(json.loads(proc.stdout.readline()))
        proc.stdin.write("garbage\n")
        proc.stdin.flush()
        assert "not JSON" in json.loads(proc.stdout.readline())["bug"]
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0 and proc.stdout.read() == ""
    finally:
        proc.kill()
        proc.wait()


def test_service_lifecycle(tmp_path):
    args = {"dir": str(tmp_path), "name": "sleeper"}
    pid = ask("service.start", {**args, "argv": ["sleep", "30"], "env": {"X": "1"}})["result"]
    assert isinstance(pid, int)
    # one agent answers the whole life cycle
    status, stop, status_after, stop_again = serve(
        *(
            json.dumps({"verb": verb, "args": args})
            for verb in ("service.status", "service.stop", "service.status", "service.stop")
        )
    )
    assert status["result"] == pid and stop["result"] is True
    assert status_after["result"] is None and stop_again["result"] is False


def test_grpc_ready_is_false_where_nothing_listens():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = s.getsockname()[1]
        assert ask("grpc.ready", {"target": f"127.0.0.1:{port}", "wait": 0.5}) == {
            "ok": True,
            "result": False,
        }


def test_tagless_ready_is_false_where_nothing_listens():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert ask("tagless.ready", {"target": f"127.0.0.1:{port}", "wait": 0.3}) == {
            "ok": True,
            "result": False,
        }


def test_cpu_read_of_a_missing_cgroup_is_empty():
    assert ask("cpu.read", {"name": "tbt-unit-no-such-cgroup"}) == {"ok": True, "result": {}}


def test_probe_reports_programs_and_modules():
    answer = ask("probe", {"programs": ["sh", "no-such-program-x"], "interfaces": ["lo"], "cgroup": False})
    probe = answer["result"]
    assert probe["programs"]["sh"] and probe["programs"]["no-such-program-x"] is None
    assert probe["interfaces"] == {"lo": True}
    assert probe["python_modules"]["numpy"] is True
    assert probe["python_modules"]["grpc"] is probe["python_modules"]["google.protobuf"] is True


def test_probe_reports_a_missing_parent_package_as_missing():
    assert agent_probe._installed("no_such_package_x.protobuf") is False


def test_every_verb_the_orchestrator_calls_exists():
    called = {
        "probe", "shape.plan", "shape.apply", "shape.read", "shape.classes", "shape.clear", "cpu.apply", "cpu.read",
        "cpu.remove", "service.start", "service.stop", "service.status", "bridge.up", "bridge.down",
        "bridge.status", "bridge.health", "bridge.restart", "appliance.check", "counters", "grpc.ready",
        "shape.replay", "shape.replay.plan", "shape.netem", "tagless.ready",
    }  # fmt: skip
    assert called == set(VERBS)


def test_agent_answer_tells_user_errors_from_bugs():
    argv = ["python", "-m", "agent", "--serve", "shape.read"]
    ok = Result("h", argv, 0, '{"ok": true, "result": [1]}\n', "")
    assert agent_answer("h", ok) == [1]
    user = Result(
        "h", argv, 0, '{"ok": false, "verb": "shape.read", "error": "no port a1", "fix": "run up"}\n', ""
    )
    with pytest.raises(UserError) as exc:
        agent_answer("h", user)
    assert str(exc.value) == "on h: no port a1 (fix: run up)" and not isinstance(exc.value, CommandError)
    remote = "Traceback (most recent call last):\n  File ...\nTypeError: boom\n"
    bug = Result("h", argv, 0, json.dumps({"ok": False, "verb": "shape.read", "bug": remote}) + "\n", "")
    with pytest.raises(AgentBug) as exc:
        agent_answer("h", bug)
    assert not isinstance(exc.value, UserError)
    assert (exc.value.host, exc.value.verb) == ("h", "shape.read")
    assert "on h:" in str(exc.value) and "shape.read" in str(exc.value) and remote.strip() in str(exc.value)


def test_an_answer_that_is_not_one_is_a_bug():
    argv = ["python", "-m", "agent", "--serve", "counters"]
    for stdout in ("", "garbage\n", "[1]\n", '{"result": 1}\n'):
        with pytest.raises(AgentBug, match="counters") as exc:
            agent_answer("h", Result("h", argv, 0, stdout, ""))
        assert not isinstance(exc.value, UserError)


def test_switch_on_the_systems_database_only_adds_the_bridge(tmp_path):
    own = Switch("tb-br0", ("a0", "a1"), tmp_path)
    system = Switch("tb-br0", ("a0", "a1"), tmp_path, datapath="system", own=False)
    assert len(own.plan_up()) == 5 and own.plan_up()[-1][1] == f"--db=unix:{tmp_path / 'db.sock'}"
    (bridge,) = system.plan_up()
    assert bridge[1] == "--db=unix:/var/run/openvswitch/db.sock" and "datapath_type=system" in bridge
    assert system.env() == {} and len(system.plan_down()) == 1
