"""Undecided cells (remote against local not significant in Welch's test) are `?`, not a 0 or 1: in the
marks, the decision figures (Agg), and the report, with their penalty. The hand-made run's numbers are
worked out in test_analysis_cells.py; here it only supplies a run with undecided, decided and missing
cells."""

import html
import re
import shutil
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest

from analysis import analyze
from analysis.cells import cell_table
from analysis.decision_plots import CATEGORIES, decision_map, decisions_figure
from analysis.decisions import decision_marks, decision_vectors, undecided_cells
from analysis.load import load_run
from analysis.predict import measured_cells
from analysis.predict_model import fit
from analysis.predict_plots import border_figure
from analysis.style import UNDECIDED_LABEL
from tests.synthetic import write_synthetic_run

FIXTURE = Path(__file__).parent.parent / "data" / "analysis" / "handmade"


@pytest.mark.parametrize(
    ("offload", "significant", "mark"),
    [
        (1, True, "1"),
        (0, True, "0"),
        (1, False, "?"),  # faster on average, but within the noise
        (0, False, "?"),
        (0, pd.NA, "?"),  # a side with one trial: the test cannot be made
        (pd.NA, pd.NA, "-"),  # no trial or no baseline
    ],
)
def test_marks(offload, significant, mark):
    cells = pd.DataFrame(
        {
            "offload": pd.array([offload], dtype="Int64"),
            "significant": pd.array([significant], dtype="boolean"),
        }
    )
    assert list(decision_marks(cells)) == [mark]


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    run = tmp_path_factory.mktemp("run") / "handmade"
    shutil.copytree(FIXTURE, run)
    return cell_table(load_run(run).trials)


def test_an_undecided_cell_keeps_its_penalty_and_a_significant_one_its_decision(cells):
    rows = cells.set_index(["size", "rate_mbps", "method"])
    # 1.75 2.0 2.25 against 1.5 2.0 2.5: equal means, so nothing to decide; the penalty is 0, not empty
    tie = rows.loc[(100, 20.0, "json")]
    assert decision_marks(tie.to_frame().T).iloc[0] == "?" and tie["penalty"] == 0.0
    # 3.0 3.5 4.0 against the same baseline: significantly slower, so stay local
    slow = rows.loc[(100, 10.0, "json")]
    assert decision_marks(slow.to_frame().T).iloc[0] == "0" and slow["penalty"] == pytest.approx(1.5)
    # 1.0 1.5 2.0 against 4.0 4.0 4.0: significantly faster, so offload
    fast = rows.loc[(200, 10.0, "raw")]
    assert decision_marks(fast.to_frame().T).iloc[0] == "1" and fast["penalty"] == pytest.approx(-2.5)
    table = undecided_cells(cells)
    listed = list(zip(table["size"], table["rate_mbps"], table["method"], strict=True))
    assert listed == [
        (100, 20.0, "json"),
        (100, 10.0, "ujson"),
        (100, 20.0, "ujson"),
        (100, 10.0, "raw"),
        (100, 10.0, "msgpack"),
        (200, 20.0, "ujson"),
    ]
    assert table["penalty"].notna().all()
    assert table["diff_ci95"].isna().tolist() == [False, False, False, True, False, False]  # raw: n = 1


def legend_texts(legend) -> list[str]:
    return [t.get_text() for t in legend.get_texts()]


def test_the_decisions_figure_stacks_undecided_rates_and_names_them_in_its_legend(cells):
    vectors = decision_vectors(cells)
    methods = ["json", "ujson", "raw", "msgpack"]
    fig = decisions_figure(
        vectors, vectors.assign(cumulative_penalty=0.0, partial_penalty=0.0), "mul", methods, 2
    )
    ax_count = fig.axes[0]
    assert legend_texts(ax_count.get_legend()) == [*methods, f"+N? {UNDECIDED_LABEL}"]
    # per method, sizes 100 and 200: significant 1s, +undecided?, and >= where rates are missing
    labels = [t.get_text() for t in ax_count.texts]
    assert labels == ["0+1?", "\u22651", "0+2?", "1+1?", "\u22650+1?", "\u22651", "\u22650+1?", "\u22650"]
    fig.savefig(StringIO(), format="svg")  # draws with Agg's text layout

    decided = vectors.assign(undecided_rates=0)
    fig = decisions_figure(
        decided, decided.assign(cumulative_penalty=0.0, partial_penalty=0.0), "mul", methods, 2
    )
    assert legend_texts(fig.axes[0].get_legend()) == methods  # nothing undecided drawn, none named


def test_the_decision_map_colours_undecided_cells_and_writes_their_penalty(cells):
    fig = decision_map(cells[cells["method"] == "ujson"], "mul", "ujson")
    assert UNDECIDED_LABEL in legend_texts(fig.legends[0])
    assert [c for c, _ in CATEGORIES].index(UNDECIDED_LABEL) == 2
    texts = [t.get_text() for t in fig.axes[0].texts]  # size 100 at 10, 20; size 200 at 10, 20
    assert texts == ["+0.75 s ?", "-0.25 s ?", "-1 s", "+2 s ?"]
    fig.savefig(StringIO(), format="svg")


def test_the_report_shows_undecided_cells_with_their_penalty(tmp_path):
    run = tmp_path / "handmade"
    shutil.copytree(FIXTURE, run)
    out = analyze(run, out=StringIO())
    page = html.unescape((out / "report.html").read_text())
    assert "? where the cell is undecided" in page
    assert "<td>0 ?</td>" in page and "<td>? ?</td>" in page  # decision vectors of 100: json, ujson
    section = page[page.index('id="undecided"') : page.index('id="failures"')]
    assert "6 cell(s) marked ?" in section
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", section, re.S)]
    assert len(rows) == 6
    # op, size, rate, method, n, mean, local n, local mean, penalty, Welch half-width: 4.303 / sqrt(3)
    assert rows[-1] == ["mul", "200", "20", "ujson", "3", "6", "3", "4", "2", "2.484"]
    assert rows[3][:4] == ["mul", "100", "10", "raw"] and rows[3][-2:] == ["0.25", ""]  # n = 1: untested
    assert "undecided (not significant)" in (out / "decisions-mul.svg").read_text()
    assert "undecided (not significant)" in (out / "decision-map-mul-json.svg").read_text()


def test_the_predicted_border_figure_draws_undecided_measured_cells_apart(tmp_path):
    run = load_run(
        write_synthetic_run(
            tmp_path / "syn", sizes=(400, 800), rates=(10, 100), methods=("json", "raw"), reps=3
        )
    )
    cells = measured_cells(run.trials, run.manifest)
    chosen = (cells["size"] == 800) & (cells["rate_mbps"] == 100.0) & (cells["method"] == "raw")
    assert decision_marks(cells[chosen]).tolist() == ["1"]  # 8x faster server, fast codec: clear
    cells["significant"] = cells["significant"].mask(chosen, False)  # as if within the noise
    fig = border_figure(fit(run.trials, run.manifest), cells, "mul")
    legend = legend_texts(fig.axes[0].get_legend())
    assert f"measured: {UNDECIDED_LABEL}" in legend and legend.count("measured: offload") == 1
    raw = fig.axes[1]  # panels in method order: json, raw
    points = {c.get_label(): c.get_offsets().tolist() for c in raw.collections}
    assert points[f"measured: {UNDECIDED_LABEL}"] == [[800.0, 100.0]]
    assert [800.0, 100.0] not in points["measured: offload"]
    fig.savefig(StringIO(), format="svg")
