"""The gRPC transport through the embedded testbed: `up` starts it, `status` checks it, and a sweep
with `--methods json,raw,protobuf,grpc` runs through the shaped link and is analysed like any other;
then a sweep over the gRPC servers of every language (`--servers python,cpp,go,java,ruby`)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from contracts.images import encode, generate
from contracts.run_format import FORMAT_VERSION
from contracts.stages import GRPC_SERVERS
from tests.helpers import run_cli
from tests.isolation import leftovers

pytestmark = pytest.mark.privileged

METHODS = ["json", "raw", "protobuf", "grpc"]


def read_csv(path: Path) -> list[dict]:
    """A CSV file's rows as text (trials.csv's format mark, a comment line, skipped)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def test_sweep_with_protobuf_and_grpc_through_the_testbed(inventory, lease, tmp_path):
    run_cli(inventory, "up")
    status = json.loads(run_cli(inventory, "status", "--json").stdout)
    assert status["services"] == {"iperf3": True, "offload": True, "grpc": True}
    target = f"{lease.address(2)}:{lease.ports[2]}"  # the server's address, the inventory's grpc_port
    assert status["grpc_target"] == target
    assert f"gRPC python {target}, cpp " in run_cli(inventory, "status").stdout
    assert [s for s, g in status["grpc_servers"].items() if g["answers"]] == ["python"]  # up's default

    results = tmp_path / "results"
    out = run_cli(
        inventory, "sweep", "--ops", "mul,log", "--sizes", "64,128", "--rates", "20,100", "--methods",
        ",".join(METHODS), "--reps", "3", "--warmup", "1", "--no-validate", "--results", str(results),
        "--name", "grpc",
    ).stdout  # fmt: skip
    assert "analysis:" in out
    (run_dir,) = results.iterdir()
    trials = read_csv(run_dir / "trials.csv")
    assert all(t["ok"] == "true" for t in trials), [t["error"] for t in trials if t["ok"] != "true"]
    remote = [t for t in trials if t["method"] != "local"]
    assert sorted({t["method"] for t in remote}) == sorted(METHODS)
    assert len(remote) == 2 * 2 * 2 * len(METHODS) * 3
    for t in remote:
        assert t["t_server_start"] == t["cpu_server_start"] == ""  # wsgi and gRPC: no process start-up
        # HTTP waits for the server's work slot (`queue`); gRPC serves on its own threads
        assert (t["t_server_queue"] == "") == (t["method"] == "grpc")
        queue = float(t["t_server_queue"] or 0)
        not_stages = ("t_server_start", "t_server_queue", "t_call_median", "t_call_p99")  # and an RPC study's
        stages = {k: float(t[k]) for k in t if k.startswith("t_") and k not in not_stages}
        assert all(v > 0 for v in stages.values()), t  # every stage measured, server ones from its timing
        assert stages["t_comm"] == pytest.approx(
            stages["t_request"]
            - queue
            - stages["t_server_decode"]
            - stages["t_server_compute"]
            - stages["t_server_encode"]
        )
    # gRPC carries the protobuf codec's bytes: the same message, plus the op's name in the request
    for op in ("mul", "log"):
        for size in ("64", "128"):
            by = {
                m: next(t for t in remote if (t["op"], t["size"], t["method"]) == (op, size, m))
                for m in METHODS
            }
            assert int(by["grpc"]["bytes_up"]) == int(by["protobuf"]["bytes_up"]) + 2 + len(op)
            assert by["grpc"]["bytes_down"] == by["protobuf"]["bytes_down"]
    # grpc reaches the server over the shaped link: at 20 Mbit/s its communication is slower than at 100
    comm = {
        rate: sum(float(t["t_comm"]) for t in remote if t["method"] == "grpc" and t["rate_mbps"] == rate)
        for rate in ("20.0", "100.0")
    }
    assert comm["20.0"] > comm["100.0"], comm

    cells = read_csv(run_dir / "analysis" / "cells.csv")
    assert len(cells) == 2 * 2 * 2 * len(METHODS) and all(int(c["n"]) == 3 for c in cells)
    assert all(float(c["json_ratio"]) > 0 and c["offload"] != "" for c in cells)
    vectors = read_csv(run_dir / "analysis" / "decision_vectors.csv")
    assert {v["method"] for v in vectors} == set(METHODS)
    assert all(v["missing_rates"] == "0" for v in vectors)
    report = (run_dir / "analysis" / "report.html").read_text()
    assert "grpc" in report and "protobuf" in report

    run_cli(inventory, "down")
    assert leftovers(lease.prefix) == []


def test_a_sweep_over_the_grpc_servers_of_each_language(inventory, tmp_path):
    results = tmp_path / "results"
    out = run_cli(
        inventory, "sweep", "--ops", "mul,inv,log", "--sizes", "64", "--rates", "100", "--methods", "grpc",
        "--servers", ",".join(GRPC_SERVERS), "--reps", "3", "--warmup", "1", "--no-validate", "--keep-up",
        "--results", str(results), "--name", "servers",
    ).stdout  # fmt: skip
    assert f"(grpc on {', '.join(GRPC_SERVERS)})" in out and "analysis:" in out
    status = json.loads(run_cli(inventory, "status", "--json").stdout)
    assert all(g["answers"] for g in status["grpc_servers"].values())  # the sweep started each
    (run_dir,) = results.iterdir()
    trials = read_csv(run_dir / "trials.csv")
    assert all(t["ok"] == "true" for t in trials), [t["error"] for t in trials if t["ok"] != "true"]
    remote = [t for t in trials if t["method"] != "local"]
    assert sorted(t["server"] for t in remote) == sorted([*GRPC_SERVERS] * 3 * 3)
    for t in remote:  # each server timed its own stages, and its bytes are the same message's
        assert all(float(t[f"t_server_{s}"]) > 0 for s in ("decode", "compute", "encode")), t
    for op in ("mul", "inv", "log"):
        sizes = {(t["bytes_up"], t["bytes_down"]) for t in remote if t["op"] == op}
        assert len(sizes) == 1, (op, sizes)
    cells = read_csv(run_dir / "analysis" / "cells.csv")
    assert sorted({c["method"] for c in cells}) == ["grpc", "grpc@cpp", "grpc@go", "grpc@java", "grpc@ruby"]
    assert (run_dir / "analysis" / "servers-mul.png").is_file()
    run_cli(inventory, "down")


def test_a_gray_sweep_over_the_grpc_servers_of_each_language(inventory, lease, tmp_path):
    """Issue 47's image workload: `gray` at sizes in megapixels over every server, the local baseline
    on the client (the Python filter), and the analysis keeping the servers apart."""
    results = tmp_path / "results"
    photo = tmp_path / "photo.png"  # a file as well: 300x200, as the embedded study's one image
    photo.write_bytes(encode(generate(101_568, seed=3)[:200, :300]))
    out = run_cli(
        inventory, "sweep", "--ops", "gray", "--sizes", "0.05MP,0.1MP", "--rates", "100", "--methods", "grpc",
        "--servers", ",".join(GRPC_SERVERS), "--reps", "3", "--warmup", "1", "--no-validate",
        "--results", str(results), "--name", "gray", "--image", str(photo),
    ).stdout  # fmt: skip
    assert "analysis:" in out
    (run_dir,) = results.iterdir()
    trials = read_csv(run_dir / "trials.csv")
    assert all(t["ok"] == "true" for t in trials), [t["error"] for t in trials if t["ok"] != "true"]
    # the pixels of 256x192, 368x276 and the file's 300x200
    assert {t["size"] for t in trials} == {"49152", "101568", "60000"}
    local = [t for t in trials if t["method"] == "local"]
    assert len(local) == 3 * 3 and all(float(t["t_total"]) > 0 for t in local)
    remote = [t for t in trials if t["method"] != "local"]
    assert sorted(t["server"] for t in remote) == sorted([*GRPC_SERVERS] * 3 * 3)
    for t in remote:
        assert all(float(t[f"t_server_{s}"]) > 0 for s in ("decode", "compute", "encode")), t
        assert int(t["bytes_up"]) > 10_000 and int(t["bytes_down"]) > 1000  # a PNG up, a gray PNG down
    cells = read_csv(run_dir / "analysis" / "cells.csv")
    assert sorted({c["method"] for c in cells}) == ["grpc", "grpc@cpp", "grpc@go", "grpc@java", "grpc@ruby"]
    assert len(cells) == 3 * len(GRPC_SERVERS) and all(int(c["n"]) == 3 for c in cells)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["experiment"]["image"] == str(photo) and manifest["format_version"] == FORMAT_VERSION
    assert leftovers(lease.prefix) == []  # the sweep brought the testbed up, and took it down


def test_a_gray_sweep_emulates_the_multilanguage_studys_devices(inventory, lease, tmp_path):
    """Issue 47 item 3: image ops in scaled mode, both ends a device. Every image stage the trials time
    has a target from the profiles' `filters` and `image_codecs` and comes out near it: unscaled, this
    host's gray would be some 10000 times under the phone's."""
    results = tmp_path / "results"
    out = run_cli(
        inventory, "sweep", "--ops", "gray", "--sizes", "0.05MP", "--rates", "100", "--methods", "grpc",
        "--reps", "3", "--warmup", "1", "--no-validate", "--results", str(results), "--name", "graydev",
        "--device", "multilang-snapdragon600", "--server-device", "multilang-i5-5200u",
    ).stdout  # fmt: skip
    assert "client device multilang-snapdragon600 (scaled)" in out
    (run_dir,) = results.iterdir()
    trials = read_csv(run_dir / "trials.csv")
    assert all(t["ok"] == "true" for t in trials), [t["error"] for t in trials if t["ok"] != "true"]
    fidelity = read_csv(run_dir / "analysis" / "trial_fidelity.csv")
    kinds = {(f["role"], f["work"], f["method"]) for f in fidelity}
    assert kinds == {
        ("client", "kernel", "local"), ("client", "png encode", "grpc"), ("client", "png decode", "grpc"),
        ("server", "png decode", "grpc"), ("server", "kernel", "grpc"), ("server", "png encode", "grpc"),
    }  # fmt: skip
    for row in fidelity:  # scaled to the device: near its target, not this host's own speed
        assert abs(float(row["error_pct"])) < 50 or float(row["target_s"]) < 0.001, row
    local = [float(t["t_total"]) for t in trials if t["method"] == "local"]
    assert all(0.1 < s < 0.2 for s in local), local  # 49152 pixels at the phone's 0.381 MP/s: 0.129 s
    assert leftovers(lease.prefix) == []
