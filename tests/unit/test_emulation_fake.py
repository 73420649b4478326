"""Device emulation's orchestration without root: which calibration runs where, the throttle quota
it derives, the granularity flags, and what the manifest and the trials keep."""

from __future__ import annotations

import json

import pytest

from contracts.device import Grid
from contracts.errors import UserError
from testbed import emulation
from testbed.devices import load_device
from tests.unit.test_labs_fake import netns  # noqa: F401 - the fake embedded testbed (fixture)

DEVICE = "paper-p4"


def host_rows(device, sizes, host_s):
    """What `client.emulation` answers for the kernel: this host takes `host_s` per size."""
    return [
        {
            "work": "kernel",
            "op": "mul",
            "size": size,
            "target_s": device.compute_s("mul", size),
            "host_cpu_s": host_s[size],
            "slowdown": device.compute_s("mul", size) / host_s[size],
            "achieved_s": device.compute_s("mul", size),
            "error_pct": 0.0,
            "flagged": False,
        }
        for size in sizes
    ]


@pytest.fixture
def scripted(netns):  # noqa: F811 - the fixture imported above
    """The client answers `python -m client.emulation` from the request it reads on stdin."""
    device = load_device(DEVICE)
    client = netns.hosts["client"]
    seen = []

    def answer(argv):
        request = json.loads(client.last_input)
        seen.append((argv, request))
        sizes = request["grid"]["sizes"]
        if request.get("check") == "wall":  # inside the limit: 1.2x the target at 500, on target at 1200
            rows = [
                {"work": "kernel", "op": "mul", "size": s, "target_s": device.compute_s("mul", s),
                 "achieved_s": device.compute_s("mul", s) * (1.2 if s == 500 else 1.0),
                 "error_pct": 20.0 if s == 500 else 0.0, "flagged": s == 500}
                for s in sizes
            ]  # fmt: skip
            return 0, json.dumps({"device": DEVICE, "mode": "throttle", "rows": rows})
        rows = host_rows(device, sizes, {500: 0.01, 1200: 0.5})
        return 0, json.dumps(
            {"device": DEVICE, "mode": "scaled", "rows": rows, "scale": {"kernel|mul|500": 1.0}}
        )

    client.on("python", answer=answer)
    client.reply("cpu.apply", lambda name, quota: None)
    client.reply("cpu.read", lambda name: {"fraction": 0.05, "period_us": 100_000, "quota_us": 5000})
    return netns, device, seen


def test_scaled_mode_calibrates_outside_the_limit_and_sets_no_quota(scripted):
    lab, device, seen = scripted
    result = emulation.emulate(lab, device, "scaled", Grid.of(["mul"], [1200, 500, 500], ["raw"]))
    ((argv, request),) = seen
    assert argv[:3] == ["python", "-m", "client.emulation"]  # not wrapped in client.cpulimit
    assert (
        request["grid"]["sizes"] == [500, 1200]
        and request["grid"]["codecs"] == ["raw"]
        and "check" not in request
    )
    assert result["scale"] == {"kernel|mul|500": 1.0}
    assert "cpu.apply" not in lab.hosts["client"].verbs()


def test_throttle_sets_the_median_kernel_ratio_as_quota_and_flags_short_work(scripted):
    lab, device, seen = scripted
    lab.hosts["client"].cgroup = lab.cgroup  # a throttled client runs its commands in the cgroup
    result = emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500, 1200], ["raw"]))
    fraction = sorted([0.01 / device.compute_s("mul", 500), 0.5 / device.compute_s("mul", 1200)])
    (apply,) = lab.hosts["client"].args("cpu.apply")
    assert apply["quota"] == pytest.approx(sum(fraction) / 2)  # the median of two
    (_, first), (argv, check) = seen
    assert check["check"] == "wall" and argv[:3] == ["python", "-m", "client.cpulimit"]  # inside the limit
    rows = {r["size"]: r for r in result["rows"]}
    assert rows[500]["flagged"] and "reason" not in rows[500]  # 1.79 s is 17 periods, but 20% off
    assert not rows[1200]["flagged"]
    assert result["quota"] == 0.05 and result["period_s"] == 0.1
    assert emulation.flagged(result) == {("mul", 500, "local")}


def test_throttle_flags_work_shorter_than_ten_periods(scripted):
    lab, device, _ = scripted
    lab.hosts["client"].reply("cpu.read", lambda name: {"fraction": 0.05, "period_us": 500_000})
    result = emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500, 1200], ["raw"]))
    rows = {r["size"]: r for r in result["rows"]}
    assert rows[500]["reason"] == "shorter than 10 quota periods of 500 ms"  # 1.79 s < 5 s
    assert rows[1200]["flagged"] is False  # 34.6 s spans 69 periods and met its target


def test_a_device_faster_than_the_host_cannot_be_throttled(scripted):
    lab, device, seen = scripted
    slow_host = {500: 10.0, 1200: 100.0}
    lab.hosts["client"].on(
        "python",
        answer=lambda argv: (0, json.dumps({"device": DEVICE, "mode": "scaled", "scale": {},
                                             "rows": host_rows(device, [500, 1200], slow_host)})),
    )  # fmt: skip
    with pytest.raises(UserError, match="faster than this host"):
        emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500, 1200], ["raw"]))
    assert "cpu.apply" not in lab.hosts["client"].verbs()


def test_the_manifest_keeps_every_calibration_and_the_quota(tmp_path, scripted):
    from testbed.results import Manifest

    lab, device, _ = scripted
    manifest = Manifest(tmp_path / "manifest.json", {})
    result = emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500, 1200], ["raw"]))
    emulation.record(manifest, device, "throttle", result, "now")
    emulation.record(manifest, device, "throttle", result, "later")
    saved = json.loads((tmp_path / "manifest.json").read_text())["device"]
    assert saved["profile"]["name"] == DEVICE and saved["mode"] == "throttle"
    assert [c["at"] for c in saved["calibrations"]] == ["now", "later"]
    assert saved["calibrations"][0]["quota"] == 0.05 and len(saved["calibrations"][0]["host"]) == 2


def test_a_slower_host_holds_the_whole_scaled_calibration_under_a_quota_and_puts_it_back(scripted):
    lab, device, seen = scripted
    lab.hosts["client"].cgroup = lab.cgroup
    applied = []
    lab.hosts["client"].reply("cpu.apply", lambda name, quota: applied.append(quota))
    lab.hosts["client"].reply("cpu.read", lambda name: {"fraction": applied[-1] if applied else None})
    result = emulation.emulate(lab, device, "scaled", Grid.of(["mul"], [500, 1200], ["raw"]), slow_host=0.3)
    ((argv, request),) = seen
    assert argv[:3] == ["python", "-m", "client.cpulimit"]  # the calibration ran inside the extra quota
    assert "check" not in request
    assert applied == [0.3, 1.0]  # no quota before: a whole core after
    assert result["slow_host"] == 0.3
    assert "extra quota of 0.3" in emulation.format_calibration(result)
    with pytest.raises(UserError, match="scaled mode only"):
        emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500], ["raw"]), slow_host=0.3)
