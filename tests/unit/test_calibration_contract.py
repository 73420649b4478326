"""A calibration typed (`contracts.calibration`): each row says its kind of work and codec, so nobody
parses the `work` label, and every stored run's manifest reads and writes as it was written."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from contracts.calibration import Calibration, CalibrationRow
from contracts.device import key, stack_key
from contracts.errors import UserError
from contracts.message import decode, encode
from contracts.run import Experiment, Manifest, read_manifest
from contracts.tolerance import DeviceTolerance
from testbed.cli.calibrate import json_tables
from testbed.devices import load_device
from testbed.run_files import ManifestFile
from testbed.sweep import device_emulation
from tests.helpers import REPO

STORED = [
    *sorted((REPO / "tests" / "data" / "runs").glob("*/manifest.json")),
    REPO / "reproductions" / "marshalling-paper" / "manifest.json",
]


def calibrations(data: dict) -> list[dict]:
    devices = [data.get("device"), data.get("server_device"), *(data.get("client_devices") or [])]
    return [c for d in devices if d for c in d["calibrations"]]


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.parent.name)
def test_every_stored_calibration_reads_and_writes_as_it_was_written(path):
    data = json.loads(path.read_text())
    manifest = Manifest.from_dict(data)
    for written, stored in zip(calibrations(manifest.as_dict()), calibrations(data), strict=True):
        # what it holds, as it held it (a later version's keys are added, null, as before these types)
        assert {k: written[k] for k in stored} == stored
        assert json.dumps(written["rows"]) == json.dumps(stored["rows"])  # each row's keys in their order
    devices = [manifest.device, manifest.server_device, *manifest.client_devices]
    typed = [c for d in devices if d for c in d.calibrations]
    for cal, stored in zip(typed, calibrations(data), strict=True):
        assert all(isinstance(r, CalibrationRow) for r in cal.rows)
        assert pd.DataFrame(cal.row_dicts()).equals(pd.DataFrame(stored["rows"]))  # the analysis's table


@pytest.mark.parametrize(
    "work, kind, codec",
    [
        ("kernel", "kernel", None),  # of every method
        ("raw kernel", "kernel", "raw"),  # in RAW's own requests (the server's cgi stack)
        ("json encode", "encode", "json"),
        ("grpc decode", "decode", "grpc"),
        ("server_start", "server_start", None),  # the stack's own, any op and size
    ],
)
def test_a_rows_work_label_is_read_once_into_its_kind_and_codec(work, kind, codec):
    size = None if kind == "server_start" else 400
    stored = {"key": "k", "work": work, "op": "mul", "size": size, "target_s": 1.0, "achieved_s": 1.1,
              "error_pct": 10.0, "flagged": False}  # fmt: skip
    row = CalibrationRow.from_dict(stored)
    assert (row.kind, row.codec, row.work) == (kind, codec, work)
    assert row.as_dict() == stored


def test_a_row_made_before_rows_had_keys_gets_its_key():
    old = {"work": "json decode", "op": "mul", "size": 200, "target_s": 1.0, "achieved_s": 1.0,
           "error_pct": 0.0, "flagged": False, "host_cpu_s": 0.01, "slowdown": 100.0}  # fmt: skip
    assert CalibrationRow.from_dict(old).key == key("decode", "mul", 200, "json")
    start = CalibrationRow.of("server_start", None, "any", None, 0.15, 0.18, DeviceTolerance(10.0))
    assert (start.key, start.error_pct, start.flagged) == (stack_key("server_start"), 20.0, True)


def test_a_row_key_the_schema_lacks_is_refused_where_the_manifest_is_read(tmp_path):
    path = tmp_path / "manifest.json"
    data = json.loads(STORED[0].read_text())
    data["device"]["calibrations"][0]["rows"][0]["wall_s"] = 1.0
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match="wall_s"):
        read_manifest(path)


def rows() -> list[CalibrationRow]:
    def row(kind, codec, size, achieved, op="mul"):
        return CalibrationRow.of(kind, codec, op, size, 1.0, achieved, DeviceTolerance(10.0), samples=4)

    return [
        row("kernel", None, 200, 1.3),
        row("kernel", "raw", 400, 1.0),
        row("encode", "json", 200, 0.8),
        row("decode", "json", 200, 1.0),
        row("server_start", None, None, 1.2, op="any"),
    ]


def test_a_calibrations_missed_targets_are_named_by_their_rows_work():
    calibration = Calibration(tolerance_pct=10.0, rows=rows())
    errors = [f"{r.error_pct:+.1f}%" for r in calibration.rows if r.flagged]
    assert device_emulation.missed_work(calibration) == [
        f"mul 200 kernel {errors[0]}",  # the kernel of every method
        f"mul 200 json encode {errors[1]}",  # a codec's work
        f"server_start {errors[2]}",  # the stack's start-up: no op, no size
    ]


def test_a_hosts_answer_says_whose_it_is_and_the_manifest_leaves_that_to_its_section(tmp_path):
    answer = Calibration(tolerance_pct=10.0, rows=rows()[:1], scale={"k": 2.0}, device="d", mode="scaled",
                         role="server")  # fmt: skip
    sent = encode(answer)
    assert (sent["device"], sent["mode"], sent["role"]) == ("d", "scaled", "server")
    assert "slow_host" not in sent and "at" in sent
    assert decode(Calibration, json.loads(json.dumps(sent))) == answer
    assert "device d (scaled): target vs achieved on the server host" in device_emulation.format_calibration(
        answer
    )

    exp = Experiment("cal", ("mul",), (200,), (10.0,), ("json",), 1)
    manifest = ManifestFile(tmp_path / "manifest.json", Manifest("run", "running", exp))
    profile = load_device("paper-p4")
    device_emulation.record_calibration(manifest, profile, "scaled", answer, "now", role="server")
    (saved,) = json.loads((tmp_path / "manifest.json").read_text())["server_device"]["calibrations"]
    assert saved["at"] == "now" and saved["scale"] == {"k": 2.0}
    assert not {"device", "mode", "role", "slow_host"} & set(saved)


def test_calibrate_json_tables_each_kind_of_work_without_parsing_its_label():
    tables = json_tables(Calibration(tolerance_pct=10.0, rows=rows(), slow_host=0.5))
    assert tables["slow_host"] == 0.5 and "quotas" not in tables
    assert [(r["size"], r["key"]) for r in tables["rows"]] == [
        (200, key("kernel", "mul", 200)),
        (400, key("kernel", "mul", 400, "raw")),  # each method's kernel: its key says which
    ]
    assert [(r["codec"], r["stage"], r["flagged"]) for r in tables["codecs"]] == [
        ("json", "encode", True),
        ("json", "decode", False),
    ]
    assert [(r["cost"], r["size"], r["samples"]) for r in tables["stack"]] == [("server_start", None, 4)]
