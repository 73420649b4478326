"""Device emulation's orchestration without root: which calibration runs where, the throttle quota
it derives, the granularity flags, and what the manifest and the trials keep."""

from __future__ import annotations

import json

import pytest

from contracts.agent_answers import CpuLimitReading
from contracts.device import Grid, key
from contracts.errors import UserError
from contracts.profiles import quota_period
from testbed.devices import load_device
from testbed.sweep import device_emulation

DEVICE = "paper-p4"
HOST_S = {500: 0.03, 1200: 0.5}  # CPU seconds of mul on this (fake) host at full speed


def host_rows(device, sizes, host_s):
    """What `client.calibration` answers for the kernel: this host takes `host_s` per size."""
    return [
        {
            "key": key("kernel", "mul", size),
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
def scripted(netns):
    """The client answers `python -m client.calibration` from the request it reads on stdin."""
    device = load_device(DEVICE)
    client = netns.hosts["client"]
    seen = []

    def answer(argv):
        request = json.loads(client.last_input)
        seen.append((argv, request))
        sizes = request["grid"]["sizes"]
        if request.get("check") == "wall":  # inside the limit, under each work's quota
            rows = []
            for s in sizes:
                k, target = key("kernel", "mul", s), device.compute_s("mul", s)
                if request.get("only") and k not in request["only"]:
                    continue
                # the work takes `ineff` times the CPU it took at full speed (as under a real quota),
                # and the quota it got scales its wall time, unless `follows_quota` is off
                ineff = netns.fake_ineff.get(s, 1.0)
                given = request["quotas"][k] if netns.fake_follows_quota else HOST_S[s] / target
                achieved = target * ineff * (HOST_S[s] / target) / given
                error = (achieved - target) / target * 100
                rows.append(
                    {"key": k, "work": "kernel", "op": "mul", "size": s, "target_s": target,
                     "achieved_s": achieved, "error_pct": error, "flagged": abs(error) > 10,
                     "period_s": quota_period(request["quotas"][k])[1] / 1e6}
                )  # fmt: skip
            return 0, json.dumps({"device": DEVICE, "tolerance_pct": 10.0, "mode": "throttle", "rows": rows})
        rows = host_rows(device, sizes, HOST_S)
        return 0, json.dumps(
            {
                "device": DEVICE,
                "tolerance_pct": 10.0,
                "mode": "scaled",
                "rows": rows,
                "scale": {"kernel|mul|500": 1.0},
            }
        )

    netns.fake_ineff, netns.fake_follows_quota = {500: 1.2}, True
    client.on("python", answer=answer)
    client.reply("cpu.apply", lambda name, quota: CpuLimitReading())
    client.reply("cpu.read", lambda name: {"fraction": 0.05, "period_us": 100_000, "quota_us": 5000})
    return netns, device, seen


def test_scaled_mode_calibrates_outside_the_limit_and_sets_no_quota(scripted):
    lab, device, seen = scripted
    result = device_emulation.emulate(lab, device, "scaled", Grid.of(["mul"], [1200, 500, 500], ["raw"]))
    ((argv, request),) = seen
    assert argv[:3] == ["python", "-m", "client.calibration"]  # not wrapped in client.cpulimit
    assert (
        request["grid"]["sizes"] == [500, 1200]
        and request["grid"]["codecs"] == ["raw"]
        and "check" not in request
    )
    assert result.scale == {"kernel|mul|500": 1.0}
    assert "cpu.apply" not in lab.hosts["client"].verbs()


def test_throttle_gives_each_kind_of_work_its_own_quota_and_corrects_what_missed(scripted):
    lab, device, seen = scripted
    lab.hosts["client"].cgroup = lab.cgroup  # a throttled client runs its commands in the cgroup
    result = device_emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500, 1200], ["raw"]))
    need = {s: HOST_S[s] / device.compute_s("mul", s) for s in HOST_S}
    # each check, and the worker after them, starts at a whole core and puts the quotas in force itself
    assert [a["quota"] for a in lab.hosts["client"].args("cpu.apply")] == [1.0] * 4
    (_, first), (argv, check), (_, again) = seen
    assert check["check"] == "wall" and argv[:3] == ["python", "-m", "client.cpulimit"]  # inside the limit
    base = (need[500] + need[1200]) / 2  # the request's, between the stages: the kernels' median
    assert check["quotas"] == {
        "kernel|mul|500": pytest.approx(need[500]),  # each size at its own speed ratio
        "kernel|mul|1200": pytest.approx(need[1200]),
        "base": pytest.approx(base),
    }
    # mul 500 came out 20% slow under its quota: checked again, alone, with 1.2x the quota
    assert again["only"] == ["kernel|mul|500"]
    assert again["quotas"]["kernel|mul|500"] == pytest.approx(1.2 * need[500])
    assert result.quotas == again["quotas"]
    rows = {r["size"]: r for r in result.row_dicts()}
    assert rows[500]["first_error_pct"] == pytest.approx(20.0) and rows[500]["error_pct"] == pytest.approx(0)
    assert rows[500]["quota"] == pytest.approx(1.2 * need[500]) and not rows[500]["flagged"]
    assert not rows[1200]["flagged"] and "first_error_pct" not in rows[1200]
    quota_us, period_us = quota_period(base)
    assert result.quota == quota_us / period_us and result.period_s == period_us / 1e6
    assert device_emulation.missed_work(result) == []
    assert "each stage under its work's quota" in device_emulation.format_calibration(result)


def test_throttle_flags_what_still_misses_after_the_correction(scripted):
    lab, device, seen = scripted
    lab.fake_follows_quota = False  # this work's wall time does not answer to its quota
    result = device_emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500, 1200], ["raw"]))
    rows = {r["size"]: r for r in result.row_dicts()}
    assert rows[500]["flagged"] and "reason" not in rows[500]  # 2.48 s spans many periods, but 20% off
    assert rows[500]["first_error_pct"] == pytest.approx(20.0)
    assert device_emulation.missed_work(result) == [f"mul 500 kernel {rows[500]['error_pct']:+.1f}%"]
    assert len(seen) == 2 + device_emulation.CORRECTIONS  # corrections up to a bound, not until it fits
    assert "(first check +20.0%, quota corrected)" in device_emulation.format_calibration(result)


def test_throttle_flags_work_shorter_than_ten_of_its_periods(scripted):
    lab, device, _ = scripted
    lab.hosts["client"].on(  # mul 500 takes 2.5 ms here: a quota of 0.0010, periods of 990 ms
        "python",
        answer=lambda argv: (0, json.dumps(
            {"device": DEVICE, "tolerance_pct": 10.0, "mode": "scaled", "scale": {},
             "rows": host_rows(device, [500, 1200], {500: 0.0025, 1200: 0.5})}
            if "check" not in json.loads(lab.hosts["client"].last_input)
            else {"device": DEVICE, "tolerance_pct": 10.0, "mode": "throttle", "rows": [
                {**r, "period_s": quota_period(json.loads(lab.hosts["client"].last_input)["quotas"][r["key"]])[1] / 1e6}
                for r in host_rows(device, [500, 1200], {500: 0.0025, 1200: 0.5})]})),
    )  # fmt: skip
    result = device_emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500, 1200], ["raw"]))
    rows = {r["size"]: r for r in result.row_dicts()}
    assert rows[500]["reason"] == "shorter than 10 quota periods of 990 ms"  # 2.48 s < 9.9 s
    assert rows[1200]["flagged"] is False  # 45.1 s under its own quota spans many periods


def test_a_device_faster_than_the_host_cannot_be_throttled(scripted):
    lab, device, seen = scripted
    slow_host = {500: 10.0, 1200: 100.0}
    lab.hosts["client"].on(
        "python",
        answer=lambda argv: (0, json.dumps({"device": DEVICE, "tolerance_pct": 10.0, "mode": "scaled", "scale": {},
                                             "rows": host_rows(device, [500, 1200], slow_host)})),
    )  # fmt: skip
    with pytest.raises(UserError, match="faster than this host"):
        device_emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500, 1200], ["raw"]))
    assert "cpu.apply" not in lab.hosts["client"].verbs()


def test_the_manifest_keeps_every_calibration_and_the_quota(tmp_path, scripted):
    from contracts.run import Experiment, Manifest
    from testbed.run_files import ManifestFile

    lab, device, _ = scripted
    exp = Experiment("cal", ("mul",), (100,), (10.0,), ("raw",), 3)
    manifest = ManifestFile(tmp_path / "manifest.json", Manifest("run", "running", exp))
    result = device_emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500, 1200], ["raw"]))
    device_emulation.record_calibration(manifest, device, "throttle", result, "now")
    device_emulation.record_calibration(manifest, device, "throttle", result, "later")
    saved = json.loads((tmp_path / "manifest.json").read_text())["device"]
    assert saved["profile"]["name"] == DEVICE and saved["mode"] == "throttle"
    assert [c["at"] for c in saved["calibrations"]] == ["now", "later"]
    first = saved["calibrations"][0]
    assert first["quota"] == result.quota and len(first["host"]) == 2
    assert first["quotas"] == result.quotas  # what each kind of work ran under


def test_a_slower_host_holds_the_whole_scaled_calibration_under_a_quota_and_puts_it_back(scripted):
    lab, device, seen = scripted
    lab.hosts["client"].cgroup = lab.cgroup
    applied = []
    lab.hosts["client"].reply("cpu.apply", lambda name, quota: applied.append(quota) or CpuLimitReading())
    lab.hosts["client"].reply("cpu.read", lambda name: {"fraction": applied[-1] if applied else None})
    result = device_emulation.emulate(
        lab, device, "scaled", Grid.of(["mul"], [500, 1200], ["raw"]), slow_host=0.3
    )
    ((argv, request),) = seen
    assert argv[:3] == ["python", "-m", "client.cpulimit"]  # the calibration ran inside the extra quota
    assert "check" not in request
    assert applied == [0.3, 1.0]  # no quota before: a whole core after
    assert result.slow_host == 0.3
    assert "extra quota of 0.3" in device_emulation.format_calibration(result)
    with pytest.raises(UserError, match="scaled mode only"):
        device_emulation.emulate(lab, device, "throttle", Grid.of(["mul"], [500], ["raw"]), slow_host=0.3)
