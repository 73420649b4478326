"""The plans of the external-system wrappers (tc, OVS, cgroups), checked without root."""

from pathlib import Path

import pytest

from appliance.shaper import plan_shaping
from appliance.switch import Switch
from appliance.tc_ops import FRESH, port_ops
from client.cpulimit import CpuLimit
from contracts.errors import UserError
from contracts.profiles import LinkSpec, quota_period


def test_htb_on_both_egress_ports_with_derived_burst():
    plan = plan_shaping(LinkSpec(20_000_000, 20_000_000), up_if="tb-a1", down_if="tb-a0", hz=250)
    assert [(p.ifname, p.direction) for p in plan] == [("tb-a1", "up"), ("tb-a0", "down")]
    for p in plan:
        assert p.rate == p.ceil == 20_000_000
        assert p.burst == p.cburst == 20_000_000 // 8 // 250 + 1514
        assert not p.needs_netem
    cmds = [op.tc() for op in port_ops(plan[0], FRESH)]
    assert cmds[0] == "tc qdisc replace dev tb-a1 root handle 1: htb default 10"
    assert "htb rate 20mbit ceil 20mbit burst 11514b cburst 11514b" in cmds[1]


def test_asymmetric_link_and_explicit_ceil_and_burst():
    link = LinkSpec(up_rate=5_000_000, down_rate=50_000_000, ceil=60_000_000, burst=30_000)
    up, down = plan_shaping(link, "a1", "a0", hz=100)
    assert (up.rate, down.rate) == (5_000_000, 50_000_000)
    assert up.ceil == down.ceil == 60_000_000
    assert up.burst == down.burst == 30_000


def test_netem_is_a_child_of_the_htb_class_with_room_for_the_bdp():
    link = LinkSpec(100_000_000, 100_000_000, delay_ms=200.0)
    up, _ = plan_shaping(link, "a1", "a0", hz=250)
    assert up.needs_netem
    # 100 Mbit/s x 200 ms = 2.5 MB = ~1651 frames of 1514 bytes; the limit must hold that
    assert up.netem_limit >= 2.5e6 / 1514
    assert "parent 1:10 handle 10: netem delay 200ms" in port_ops(up, FRESH)[2].tc()


def test_ovs_plan_uses_its_own_rundir_and_the_userspace_datapath(tmp_path):
    sw = Switch("tb-br0", ("tb-a0", "tb-a1"), tmp_path)
    plan = sw.plan_up()
    assert plan[0][:2] == ["ovsdb-tool", "create"]
    flat = [" ".join(argv) for argv in plan]
    assert all(str(tmp_path) in line for line in flat[1:])
    assert "datapath_type=netdev" in flat[-1]
    assert "add-port tb-br0 tb-a0" in flat[-1] and "add-port tb-br0 tb-a1" in flat[-1]
    assert all("--detach" in argv for argv in plan if argv[0] in ("ovsdb-server", "ovs-vswitchd"))
    assert sw.env()["OVS_RUNDIR"] == str(tmp_path)


@pytest.mark.parametrize(
    ("fraction", "quota", "period"),
    [
        (1.0, 1_000, 1_000),
        (0.5, 1_000, 2_000),
        (0.05, 1_000, 20_000),
        (0.04, 1_000, 25_000),
        (0.03, 1_000, 33_334),
        (0.01, 1_000, 100_000),
        (0.005, 1_000, 200_000),
        (0.001, 1_000, 1_000_000),
    ],
)
def test_the_period_is_the_shortest_with_a_1ms_quota(fraction, quota, period):
    assert quota_period(fraction) == (quota, period)


def test_quota_below_the_kernel_minimum_is_refused():
    with pytest.raises(UserError):
        quota_period(0.0005)


def test_cgroup_v1_plan_writes_period_before_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    limit = CpuLimit("tb-client", 0.05, root=tmp_path)
    assert limit.version == 1
    assert [str(w) for w in limit.plan()] == [
        f"echo 20000 > {tmp_path}/cpu/tb-client/cpu.cfs_period_us",
        f"echo 1000 > {tmp_path}/cpu/tb-client/cpu.cfs_quota_us",
    ]


def test_cgroup_v2_plan_enables_the_controller_and_sets_cpu_max(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids")
    limit = CpuLimit("tb-client", 0.005, root=tmp_path)
    assert limit.version == 2
    assert [str(w) for w in limit.plan()] == [
        f"echo +cpu > {tmp_path}/cgroup.subtree_control",
        f"echo 1000 200000 > {tmp_path}/tb-client/cpu.max",
    ]


def test_no_cpu_controller_is_a_user_error(tmp_path: Path):
    with pytest.raises(UserError, match="no cgroup cpu controller"):
        CpuLimit("tb-client", 0.05, root=tmp_path)
