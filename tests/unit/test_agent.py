"""The host agent's protocol and verbs, without root: JSON in, JSON out, errors by structure."""

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
from contracts.errors import CommandError, UserError
from contracts.units import kernel_hz
from testbed.hosts import agent_answer


def ask(verb: str, payload: str | dict) -> tuple[int, dict]:
    out = io.StringIO()
    text = payload if isinstance(payload, str) else json.dumps(payload)
    status = agent_main.main([verb], io.StringIO(text), out)
    return status, json.loads(out.getvalue())


def test_split_command():
    assert split_command(["--name", "n", "--", "iperf3", "-s", "--", "x"]) == (
        ["--name", "n"],
        ["iperf3", "-s", "--", "x"],
    )
    assert split_command(["--name", "n"]) == (["--name", "n"], [])


def test_limit_wrapper_without_a_command_is_refused():
    with pytest.raises(SystemExit):
        cpulimit.main(["--name", "tbt-unit"])


def test_unknown_verb_is_a_usage_error(capsys):
    assert agent_main.main(["no.such.verb"], io.StringIO("{}"), io.StringIO()) == 64
    assert "one of:" in capsys.readouterr().err


def test_arguments_that_are_not_json_are_a_structured_error():
    status, answer = ask("shape.read", "{not json")
    assert status == 2 and answer["ok"] is False and "not JSON" in answer["error"]
    status, answer = ask("shape.read", "[1, 2]")
    assert status == 2 and "JSON object" in answer["error"]


def test_shape_plan_is_built_with_this_hosts_kernel_hz():
    link = {"up_rate": 20_000_000, "down_rate": 10_000_000, "mtu": 1500}
    status, answer = ask("shape.plan", {"link": link, "up_if": "tb-a1", "down_if": "tb-a0"})
    assert status == 0 and answer["ok"]
    up, down = answer["result"]
    assert (up["ifname"], up["direction"], up["rate"]) == ("tb-a1", "up", 20_000_000)
    assert (down["ifname"], down["rate"]) == ("tb-a0", 10_000_000)
    assert up["burst"] == 20_000_000 // 8 // kernel_hz() + 1514
    assert any("htb rate 20mbit" in c for c in up["commands"])


def test_a_user_error_comes_back_with_its_fix():
    link = {"up_rate": 10**6, "down_rate": 10**6}
    status, answer = ask("shape.apply", {"link": link, "up_if": "tbt-nope1", "down_if": "tbt-nope0"})
    assert status == 2
    assert answer == {
        "ok": False,
        "error": "appliance port tbt-nope1 does not exist",
        "fix": "run testbed up first",
    }


def test_a_wrong_call_is_a_bug_with_a_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "shape.read"], input='{"wrong": 1}', capture_output=True, text=True
    )
    assert proc.returncode == 1 and "Traceback" in proc.stderr and proc.stdout == ""


def test_service_lifecycle(tmp_path):
    args = {"dir": str(tmp_path), "name": "sleeper"}
    status, answer = ask("service.start", {**args, "argv": ["sleep", "30"], "env": {"X": "1"}})
    pid = answer["result"]
    assert status == 0 and isinstance(pid, int)
    assert ask("service.status", args)[1]["result"] == pid
    assert ask("service.stop", args)[1]["result"] is True
    assert ask("service.status", args)[1]["result"] is None
    assert ask("service.stop", args)[1]["result"] is False


def test_grpc_ready_is_false_where_nothing_listens():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = s.getsockname()[1]
        assert ask("grpc.ready", {"target": f"127.0.0.1:{port}", "wait": 0.5}) == (
            0,
            {"ok": True, "result": False},
        )


def test_cpu_read_of_a_missing_cgroup_is_empty():
    assert ask("cpu.read", {"name": "tbt-unit-no-such-cgroup"}) == (0, {"ok": True, "result": {}})


def test_probe_reports_programs_and_modules():
    status, answer = ask(
        "probe", {"programs": ["sh", "no-such-program-x"], "interfaces": ["lo"], "cgroup": False}
    )
    probe = answer["result"]
    assert probe["programs"]["sh"] and probe["programs"]["no-such-program-x"] is None
    assert probe["interfaces"] == {"lo": True}
    assert probe["python_modules"]["numpy"] is True
    assert probe["python_modules"]["grpc"] is probe["python_modules"]["google.protobuf"] is True


def test_probe_reports_a_missing_parent_package_as_missing():
    assert agent_probe._installed("no_such_package_x.protobuf") is False


def test_every_verb_the_orchestrator_calls_exists():
    called = {
        "probe", "shape.plan", "shape.apply", "shape.read", "shape.clear", "cpu.apply", "cpu.read",
        "cpu.remove", "service.start", "service.stop", "service.status", "bridge.up", "bridge.down",
        "bridge.status", "counters", "grpc.ready",
    }  # fmt: skip
    assert called == set(VERBS)


def test_agent_answer_tells_user_errors_from_bugs():
    ok = Result("h", ["python", "-m", "agent", "x"], 0, '{"ok": true, "result": [1]}\n', "")
    assert agent_answer("h", ok) == [1]
    user = Result("h", [], 2, '{"ok": false, "error": "no port a1", "fix": "run up"}\n', "")
    with pytest.raises(UserError) as exc:
        agent_answer("h", user)
    assert str(exc.value) == "on h: no port a1 (fix: run up)" and not isinstance(exc.value, CommandError)
    bug = Result("h", ["python"], 1, "", "Traceback ...\nTypeError: boom")
    with pytest.raises(CommandError, match="TypeError: boom"):
        agent_answer("h", bug)


def test_switch_on_the_systems_database_only_adds_the_bridge(tmp_path):
    own = Switch("tb-br0", ("a0", "a1"), tmp_path)
    system = Switch("tb-br0", ("a0", "a1"), tmp_path, datapath="system", own=False)
    assert len(own.plan_up()) == 5 and own.plan_up()[-1][1] == f"--db=unix:{tmp_path / 'db.sock'}"
    (bridge,) = system.plan_up()
    assert bridge[1] == "--db=unix:/var/run/openvswitch/db.sock" and "datapath_type=system" in bridge
    assert system.env() == {} and len(system.plan_down()) == 1
