"""An RPC study's analysis (`analysis.rpc_study`): a call's time per cell with its CI, tagless against
gRPC with the CI of the ratio, gRPC's extra bytes per LargeData member from the wire counts, the
study's figures beside ours with the difference split into what was measured, calls faster than
their link allows flagged, and a run directory analysed end to end from its files."""

from __future__ import annotations

import io
import math
from dataclasses import replace
from itertools import product

import pandas as pd
import pytest

from analysis import analyze
from analysis.compare import compare_runs, summary_lines
from analysis.rpc_study import headlines, rpc_cells, rpc_ratios, study_table
from contracts.errors import UserError
from contracts.grid import UNSHAPED
from contracts.run import (
    MANIFEST_FILE,
    TRIALS_FILE,
    Experiment,
    Manifest,
    TrialRecord,
    TrialWriter,
    write_manifest,
)
from tests.helpers import REPO

# per call: (seconds, server CPU, framed bytes each way, wire bytes each way) by transport
CALL = {
    ("SayHello", 7, "tagless"): (120e-6, 5e-6, (27, 33), (96, 148)),
    ("SayHello", 7, "grpc"): (480e-6, 8e-6, (14, 20), (143, 269)),
    ("SendRcvLargeData", 8192, "tagless"): (0.7e-3, 40e-6, (32784, 32784), (34850, 34850)),
    ("SendRcvLargeData", 8192, "grpc"): (3.7e-3, 260e-6, (62420, 62420), (66300, 66300)),
}
JITTER = (0.98, 1.0, 1.02)  # the three repetitions' spread around the call's time


def rows(
    rate: float = UNSHAPED, calls: int = 1000, servers: tuple[str, ...] = ("python",)
) -> list[TrialRecord]:
    out = []
    for ((op, size, method), (t, cpu, framed, wire)), server in product(CALL.items(), servers):
        for rep, k in enumerate(JITTER):
            out.append(
                TrialRecord(
                    op, size, method, True, run_id="r", trial=len(out), rate_mbps=rate, rep=rep,
                    t_total=t * k * calls, calls=calls, t_call_median=t * k, t_call_p99=2 * t,
                    cpu_server_call=cpu, bytes_up=framed[0], bytes_down=framed[1], wire_up=wire[0],
                    wire_down=wire[1], server=server,
                )
            )  # fmt: skip
    return out


def frame(records: list[TrialRecord]) -> pd.DataFrame:
    return pd.DataFrame([r.__dict__ for r in records])


def test_a_cells_call_is_its_batches_mean_and_the_ratio_has_a_ci_around_it():
    cells = rpc_cells(frame(rows(calls=500)))
    hello = cells[(cells["op"] == "SayHello") & (cells["method"] == "tagless")].iloc[0]
    assert hello["n"] == 3 and hello["calls"] == 500
    assert hello["per_call_s"] == pytest.approx(120e-6) and hello["per_1000_s"] == pytest.approx(0.12)
    assert 0 < hello["per_call_ci95"] < 120e-6 * 0.1
    ratios = rpc_ratios(cells)
    say = ratios[ratios["op"] == "SayHello"].iloc[0]
    assert say["ratio"] == pytest.approx(0.25) and say["ratio_low"] < 0.25 < say["ratio_high"]
    assert say["significant"] and say["saved_per_call_s"] == pytest.approx(360e-6)


def test_grpcs_extra_bytes_per_member_come_from_the_wire_counts():
    ratios = rpc_ratios(rpc_cells(frame(rows())))
    large = ratios[ratios["op"] == "SendRcvLargeData"].iloc[0]
    assert large["wire_extra_per_member"] == pytest.approx((66300 - 34850) / 8192)
    assert large["wire_extra_per_member"] >= 2  # the bound at K = 8192
    assert large["message_extra_per_call"] == 2 * (62420 - 32784)


def test_the_studys_figures_stand_beside_ours_with_the_difference_measured():
    table = study_table(rpc_ratios(rpc_cells(frame(rows()))))
    hello = table[table["op"] == "SayHello"].iloc[0]
    assert hello["study_ratio"] == pytest.approx(279 / 305) and hello["ratio"] == pytest.approx(0.25)
    assert hello["why"].startswith("gRPC +360 us a call: server CPU +3 us")
    assert "client and transport +357 us" in hello["why"]  # 360 - 3 - 0 on the unshaped link
    assert (table[table["op"] == "Average"]["why"] == "not run").all()


def test_a_call_faster_than_its_bytes_at_the_links_rate_is_flagged():
    # at 100 Mbit/s LargeData8192's 69700 wire bytes need 5.6 ms; a 0.7 ms call passed a burst
    cells = rpc_cells(frame(rows(rate=100.0)))
    flagged = cells[cells["below_link_bound"]]
    assert set(zip(flagged["op"], flagged["method"], strict=True)) == {
        ("SendRcvLargeData", "tagless"),
        ("SendRcvLargeData", "grpc"),
    }
    assert not rpc_cells(frame(rows()))["below_link_bound"].any()  # unshaped: no bound
    assert math.isnan(rpc_cells(frame(rows()))["link_bound_s"].iloc[0])


def test_an_rpc_run_is_analysed_from_its_files(tmp_path):
    writer = TrialWriter(tmp_path / TRIALS_FILE)
    for row in rows(servers=("python", "cpp")):  # loaded, gRPC's rows on C++ read as `grpc@cpp`
        writer.write(row)
    writer.close()
    exp = Experiment(name="t", ops=("SayHello", "SendRcvLargeData"), sizes=(7, 8192), rates_mbps=(UNSHAPED,),
                     methods=("tagless", "grpc"), reps=3, local=False, calls=1000,
                     op_sizes=(("SayHello", (7,)), ("SendRcvLargeData", (8192,))))  # fmt: skip
    write_manifest(tmp_path / MANIFEST_FILE, Manifest(run_id="t-1", status="complete", experiment=exp))
    said = io.StringIO()
    out = analyze(tmp_path, out=said)
    assert len(pd.read_csv(out / "rpc_cells.csv")) == 8
    ratios = pd.read_csv(out / "rpc_ratios.csv")
    assert sorted(zip(ratios["op"], ratios["server"], strict=True)) == [
        (op, s) for op in ("SayHello", "SendRcvLargeData") for s in ("cpp", "python")
    ]
    assert sorted(p.name for p in out.glob("rpc-fig9*.png")) == ["rpc-fig9c.png", "rpc-fig9d.png"]
    page = (out / "report.html").read_text()
    assert "RPC study: t-1" in page and "Against the lightweight-RPC study" in page and "host speed" in page
    assert "<li>SayHello: tagless/gRPC per call 0.25 (" in page and "the study: 0.91" in page  # first
    summary = said.getvalue()
    lines = summary.splitlines()
    assert lines[1].startswith("SayHello on cpp, unshaped: tagless/gRPC per call SayHello 0.25 [")
    assert any(
        x.startswith("SayHello on python, unshaped: tagless/gRPC per call SayHello 0.25") for x in lines
    )
    assert not (out / "decision_vectors.csv").exists()  # no offload decisions: a call has no local side


def test_the_headline_of_an_operation_leaves_its_flagged_cells_out():
    ratios = rpc_ratios(rpc_cells(frame(rows(rate=100.0) + rows())))
    lines = headlines(ratios)
    large = next(x for x in lines if x.startswith("SendRcvLargeData"))
    assert "100M" not in large and "unshaped" in large  # at 100 Mbit/s both its cells beat the link
    assert large.endswith("the study: 0.08-0.37")


def write_run(where, records: list[TrialRecord], run_id: str):
    where.mkdir()
    writer = TrialWriter(where / TRIALS_FILE)
    for row in records:
        writer.write(row)
    writer.close()
    exp = Experiment(name="t", ops=("SayHello", "SendRcvLargeData"), sizes=(7, 8192), rates_mbps=(UNSHAPED,),
                     methods=("tagless", "grpc"), reps=3, local=False, calls=1000)  # fmt: skip
    write_manifest(where / MANIFEST_FILE, Manifest(run_id=run_id, status="complete", experiment=exp))
    return where


def test_rpc_runs_compare_by_a_calls_mean_time_and_never_with_an_offload_run(tmp_path):
    first = write_run(tmp_path / "a", rows(servers=("python", "cpp")), "a-1")
    slower = [replace(r, t_total=r.t_total * 1.5) if r.method == "grpc" and r.server == "cpp" else r
              for r in rows(servers=("python", "cpp"))]  # fmt: skip
    second = write_run(tmp_path / "b", slower, "b-1")
    result = compare_runs([first, second])
    assert result.decisions.empty and set(result.means["quantity"]) == {"call"}
    assert len(result.means) == 8 and int(result.means["within"].sum()) == 6
    lines = summary_lines(result)
    assert lines[1].startswith("decisions: none (RPC study runs")
    assert "  SayHello 7 grpc@cpp @ unshaped call (b-1): 0.00072 s against 0.00048 s (+50.0%)" in lines
    with pytest.raises(UserError, match="compares only with RPC runs"):
        compare_runs([first, REPO / "tests" / "data" / "runs" / "v3-tiny"])
