"""The gRPC servers by language (server.languages) and `python -m server --grpc-servers`, without
starting any: their command lines, and the one-line errors for an unknown or unbuilt server."""

from __future__ import annotations

import json
import sys

import pytest

import server.languages as languages
from contracts.errors import UserError
from contracts.stages import grpc_port, tagless_servers
from server.__main__ import main as server_main


def test_each_language_has_a_port_of_its_own_and_the_list_keeps_their_order():
    assert [grpc_port(50051, s) for s in languages.LANGUAGES] == [50051, 50052, 50053, 50054, 50055]
    assert languages.parse_languages(" go, python,go") == ("python", "go")
    assert languages.parse_languages("ruby,java,cpp") == ("cpp", "java", "ruby")


def test_every_language_takes_the_same_flags():
    for language in languages.LANGUAGES:
        argv = languages.grpc_argv(language, "10.0.0.2", 50051, 1.5, parent=42)
        assert argv[-8:] == [
            "--bind",
            "10.0.0.2",
            "--port",
            "50051",
            "--max-body-mb",
            "1.5",
            "--parent",
            "42",
        ]
    assert languages.grpc_argv("python", "::1", 1, 2.0)[:3] == [sys.executable, "-m", "server.grpc_service"]
    assert languages.grpc_argv("cpp", "::1", 1, 2.0)[0] == str(languages.BINARIES["cpp"])


def test_java_and_ruby_run_on_their_runtime_what_their_build_left(tmp_path, monkeypatch):
    """Java runs the built jar (`java ... -jar`), Ruby its script once the build has generated its
    messages (the build's mark); each program's last word is what names its process."""
    jar, ready = tmp_path / "offload-server-java.jar", tmp_path / "ready"
    for built in (jar, ready):
        built.write_bytes(b"")
    monkeypatch.setitem(languages.BINARIES, "java", jar)
    monkeypatch.setitem(languages.BINARIES, "ruby", ready)
    runtimes = {"java": "/usr/bin/java", "ruby": "/usr/bin/ruby"}
    monkeypatch.setattr(languages.shutil, "which", runtimes.get)
    java = languages.program("java")
    assert (java[0], java[-2:]) == ("/usr/bin/java", ["-jar", str(jar)])
    assert languages.program("ruby") == [
        "/usr/bin/ruby",
        str(languages.SERVER_DIR / "ruby" / "offload_server.rb"),
    ]
    assert (languages.SERVER_DIR / "ruby" / "offload_server.rb").is_file()
    monkeypatch.setattr(languages.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="the ruby gRPC server needs ruby, which is not installed") as exc:
        languages.program("ruby")
    assert exc.value.fix == "bash scripts/setup.sh"
    ready.unlink()
    with pytest.raises(UserError, match="the ruby gRPC server is not built"):
        languages.program("ruby")


def test_an_unknown_or_unbuilt_server_is_a_user_error_naming_the_fix(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="unknown gRPC server 'rust'") as exc:
        languages.program("rust")
    assert "python, cpp, go, java, ruby" in exc.value.fix
    monkeypatch.setitem(languages.BINARIES, "go", tmp_path / "offload-server-go")
    with pytest.raises(UserError, match="the go gRPC server is not built") as exc:
        languages.program("go")
    assert exc.value.fix == "bash scripts/setup.sh"


def test_the_server_dry_run_names_each_grpc_server_and_its_port_and_refuses_an_unbuilt_one(
    tmp_path, monkeypatch, capsys
):
    assert server_main(["--grpc-port", "50051", "--grpc-servers", "go,python", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["grpc"] == {"python": 50051, "go": 50053}
    for language, built in (("java", "offload-server-java.jar"), ("ruby", "ready")):
        monkeypatch.setitem(languages.BINARIES, language, tmp_path / built)
        (tmp_path / built).write_bytes(b"")
    monkeypatch.setattr(languages.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert server_main(["--grpc-port", "50051", "--grpc-servers", "ruby,java", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["grpc"] == {"java": 50054, "ruby": 50055}
    assert server_main(["--dry-run"]) == 0  # no --grpc-port: no gRPC server
    assert json.loads(capsys.readouterr().out)["grpc"] == {}
    monkeypatch.setitem(languages.BINARIES, "cpp", tmp_path / "missing")
    for argv, words in (
        (["--grpc-servers", "cpp"], "the cpp gRPC server is not built"),
        (["--grpc-servers", "python,rust"], "unknown gRPC server 'rust'"),
        (["--port", "50052"], "not --port"),  # cpp's port
    ):
        with pytest.raises(SystemExit) as exit_:
            server_main(["--grpc-port", "50051", *argv, "--dry-run"])
        assert exit_.value.code == 2
        assert words in capsys.readouterr().err


def test_the_tagless_servers_are_python_and_cpp_beside_it_each_on_its_port(tmp_path, monkeypatch, capsys):
    assert tagless_servers(("go", "java")) == ("python",) and tagless_servers(("cpp",)) == ("python", "cpp")
    assert server_main(["--grpc-port", "50051", "--tagless-port", "50061", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["tagless"] == {"python": 50061}
    for name in ("offload-server-cpp", "tagless-server-cpp"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setitem(languages.BINARIES, "cpp", tmp_path / "offload-server-cpp")
    monkeypatch.setitem(languages.TAGLESS_BINARIES, "cpp", tmp_path / "tagless-server-cpp")
    argv = ["--grpc-port", "50051", "--grpc-servers", "python,cpp", "--tagless-port", "50061", "--dry-run"]
    assert server_main(argv) == 0
    assert json.loads(capsys.readouterr().out)["tagless"] == {"python": 50061, "cpp": 50062}
    assert languages.tagless_argv("cpp", "::1", 50062, 2.0, parent=7) == [
        str(tmp_path / "tagless-server-cpp"),
        *("--bind", "::1", "--port", "50062", "--max-body-mb", "2.0", "--parent", "7"),
    ]
    monkeypatch.setitem(languages.TAGLESS_BINARIES, "cpp", tmp_path / "missing")
    for extra, words in (
        (["--grpc-servers", "cpp", "--tagless-port", "50061"], "the cpp tagless server is not built"),
        (["--tagless-port", "50051"], "not --port or a gRPC port"),
        (["--tagless-port", "0"], "must be 1-65535"),
    ):
        with pytest.raises(SystemExit) as exit_:
            server_main(["--grpc-port", "50051", *extra, "--dry-run"])
        assert exit_.value.code == 2
        assert words in capsys.readouterr().err
