"""The cgi stack's lighttpd plan (`server.lighttpd`), printed and checked without starting anything."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contracts.limits import Limits
from contracts.profiles import MALLOC_ENV
from server import handler
from server.__main__ import main
from server.lighttpd import PASSED_VARS, SCRIPT, LighttpdPlan

REPO = Path(__file__).resolve().parents[2]


def settings(text: str) -> dict[str, str]:
    """lighttpd.conf as key -> value text (one setting a line, comments skipped)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition(" = ")
            assert key not in out, f"{key} set twice"
            out[key] = value
    return out


@pytest.fixture
def plan(tmp_path) -> LighttpdPlan:
    return LighttpdPlan(
        bind="10.78.0.2",
        port=18080,
        state_dir=tmp_path / "cgi-stack",
        max_body_mb=1.5,
        read_timeout=20.0,
        python="/venv/bin/python",
        project_root="/code",
        env={"OPENBLAS_NUM_THREADS": "1", "MALLOC_TRIM_THRESHOLD_": "1073741824"},
    )


def test_lighttpd_listens_on_the_servers_address_and_port_and_keeps_everything_in_its_dir(plan):
    conf = settings(plan.config())
    state = str(plan.state_dir)
    assert conf["server.bind"] == '"10.78.0.2"' and conf["server.port"] == "18080"
    for key in ("server.document-root", "server.errorlog", "accesslog.filename", "server.upload-dirs"):
        assert state + "/" in conf[key], key
    assert conf["server.errorfile-prefix"] == json.dumps(f"{state}/errors/")
    assert "mod_cgi" in conf["server.modules"]
    assert conf["cgi.assign"] == '(".py" => "/venv/bin/python")'
    assert "server.pid-file" not in conf and "server.username" not in conf


def test_it_runs_in_the_foreground_so_the_agents_pid_file_and_process_group_hold_it(plan):
    assert plan.argv() == ["lighttpd", "-D", "-f", str(plan.state_dir / "lighttpd.conf")]


def test_the_request_bound_is_the_servers_limit_in_kib_rounded_up(plan):
    conf = settings(plan.config())
    max_body = Limits.from_mb(1.5).max_body
    kib = int(conf["server.max-request-size"])
    assert kib * 1024 >= max_body > (kib - 1) * 1024  # not below the limit, and less than a KiB over
    assert plan.max_request_kib == kib == 1536
    odd = LighttpdPlan("127.0.0.1", 1, plan.state_dir, max_body_mb=0.0001)  # 104 bytes
    assert odd.max_request_kib == 1


def test_the_api_paths_reach_the_one_script_with_path_info(plan):
    conf = settings(plan.config())
    rule = re.fullmatch(r'\("(.+)" => "(.+)"\)', conf["url.rewrite-once"])
    pattern, target = rule.groups()
    assert (
        re.sub(pattern.replace("\\\\", "\\"), target.replace("$1", r"\1"), "/v1/ops/mul")
        == f"/{SCRIPT}/v1/ops/mul"
    )
    assert re.match(pattern, "/other") is None


def test_the_cgi_environment_carries_the_blas_caps_and_the_lock(plan):
    conf = settings(plan.config())
    env = conf["setenv.add-environment"]
    assert '"OPENBLAS_NUM_THREADS" => "1"' in env
    assert '"MALLOC_TRIM_THRESHOLD_" => "1073741824"' in env  # the calibration's malloc, as the trials'
    assert set(MALLOC_ENV) <= set(PASSED_VARS)  # what `python -m server` hands lighttpd of its environment
    assert f'"OFFLOAD_LOCK" => "{plan.state_dir}/one-at-a-time.lock"' in env
    assert conf["server.max-keep-alive-idle"] == conf["server.max-read-idle"] == "20"  # as on wsgi
    assert "server.max-keep-alive-requests" not in conf  # kept alive as the client asks, as on wsgi


def test_the_script_runs_server_cgi_with_the_limit_from_the_project(plan, tmp_path):
    script = plan.script()
    assert "sys.path.insert(0, '/code')" in script
    assert "sys.exit(main(max_body_mb=1.5, start_lock=(lock, waited)))" in script
    # the replicas' CPU lock is taken before the imports that start the request's process
    assert script.index("waited = lock.take()") < script.index("from server.cgi import main")
    compile(script, SCRIPT, "exec")


def test_lighttpds_own_refusals_are_the_servers_json(plan):
    pages = {name: json.loads(text) for name, text in plan.error_pages().items()}
    too_large = handler.error_reply(
        413, "body too large", handler.too_large_detail(Limits.from_mb(1.5).max_body)
    )
    assert pages["413.html"] == json.loads(too_large.body)
    assert settings(plan.config())["mimetype.assign"] == '(".html" => "application/json")'


def test_write_puts_exactly_the_printed_plan_on_disk(plan):
    plan.write()
    for name, text in plan.plan()["files"].items():
        assert Path(name).read_text() == text
    for d in ("www", "errors", "uploads", "logs"):
        assert (plan.state_dir / d).is_dir()


def test_python_m_server_stack_cgi_dry_run_prints_the_plan(tmp_path, capsys):
    args = ["--stack", "cgi", "--state-dir", str(tmp_path), "--bind", "10.0.0.2", "--port", "18081"]
    assert main([*args, "--max-body-mb", "2", "--grpc-port", "50052", "--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["grpc"] == {"python": 50052}  # gRPC stays its long-lived server on the cgi stack
    conf = settings(out["lighttpd"]["files"][str(tmp_path / "lighttpd.conf")])
    assert conf["server.port"] == "18081" and conf["server.max-request-size"] == "2048"
    assert out["lighttpd"]["argv"][-1] == str(tmp_path / "lighttpd.conf")
    assert not list(tmp_path.iterdir())  # a dry run writes nothing


def test_the_cgi_stack_needs_a_state_dir(capsys):
    with pytest.raises(SystemExit):
        main(["--stack", "cgi", "--dry-run"])
    assert "--state-dir" in capsys.readouterr().err
