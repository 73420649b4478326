"""Plots and report.html on small synthetic runs: files exist, are valid, and the page is self-contained."""

import base64
import csv
import json
import re
import shutil
import xml.etree.ElementTree as ET
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest

from analysis import analyze
from analysis.cells import cell_table
from analysis.decisions import cumulative_penalties, decision_vectors
from analysis.load import load_run
from analysis.plots import make_plots
from contracts.run import TrialWriter, read_trials
from tests.synthetic import write_synthetic_run

FIXTURE = Path(__file__).parent.parent / "data" / "analysis" / "handmade"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fail_cell(run_dir: Path, op: str, size: int, rate: float, method: str) -> None:
    """Turn every trial of one cell into a failure, as a crashed server would."""
    path = run_dir / "trials.csv"
    records = read_trials(path).records
    path.unlink()
    writer = TrialWriter(path)
    for r in records:
        if (r.op, r.size, r.method, r.rate_mbps) == (op, size, method, rate):
            r = replace(r, ok=False, error="boom", t_total=None, t_comm=None)
        writer.write(r)
    writer.close()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = write_synthetic_run(
        tmp_path_factory.mktemp("runs") / "synthetic-1",
        ops=("mul", "inv"),
        sizes=(200, 400),
        rates=(10, 40),
        methods=("raw", "json", "ujson"),
        reps=3,
        fail_every=7,
    )
    fail_cell(run_dir, "inv", 400, 40, "raw")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["validation"][0].update(ok=False, error_pct=-9.9)
    manifest["inventory"] = "http://10.0.0.2:8080/"  # text that mentions a URL is not a reference
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    (run_dir / "analysis").mkdir()
    (run_dir / "analysis" / "stages-old-999.png").write_bytes(b"stale")
    text = StringIO()
    out = analyze(run_dir, out=text)
    return out, text.getvalue()


EXPECTED_STEMS = (
    [f"stages-{op}-{size}" for op in ("inv", "mul") for size in (200, 400)]
    + [f"decisions-{op}" for op in ("inv", "mul")]
    + [f"decision-map-{op}-{m}" for op in ("inv", "mul") for m in ("json", "ujson", "raw")]
    + [f"ratios-{op}" for op in ("inv", "mul")]
)


def test_every_plot_is_a_valid_png_and_svg(run):
    out, _ = run
    assert sorted(p.stem for p in out.glob("*.png")) == sorted(EXPECTED_STEMS)
    assert sorted(p.stem for p in out.glob("*.svg")) == sorted(EXPECTED_STEMS)
    for stem in EXPECTED_STEMS:
        png = (out / f"{stem}.png").read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 10_000, stem
        root = ET.parse(out / f"{stem}.svg").getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg", stem


def test_report_embeds_one_image_per_plot_and_nothing_external(run):
    out, _ = run
    page = (out / "report.html").read_text()
    images = re.findall(r"<img [^>]*src=\"([^\"]+)\"", page)
    assert len(images) == len(EXPECTED_STEMS) == page.count("<img ")
    embedded = {base64.b64decode(src.removeprefix("data:image/png;base64,")) for src in images}
    assert embedded == {(out / f"{stem}.png").read_bytes() for stem in EXPECTED_STEMS}
    references = re.findall(r"(?:src|href)\s*=\s*[\"']?([^\"' >]+)", page)
    assert references and not [r for r in references if re.match(r"(?i)(https?:)?//", r)]
    assert not re.search(r"(?i)<script|<link|@import|url\(", page)
    assert "http://10.0.0.2:8080/" in page  # the manifest's text is shown, escaped, not linked


def test_report_shows_manifest_validation_and_tables(run):
    out, _ = run
    page = (out / "report.html").read_text()
    assert "synthetic-1" in page and "experiment" in page and "measured_mbps" in page
    assert '<tr class="bad">' in page  # the failed validation row is highlighted
    assert '<tr class="missing">' in page  # the cell whose trials all failed
    for heading in ("Decision vectors", "Cumulative penalty vectors", "Cells", "Failures"):
        assert heading in page


def test_summary_and_missing_cell(run):
    out, text = run
    assert "inv 400: json" in text and "| cumulative penalty [json" in text
    assert re.search(r"raw \d - \(\d/2, 1 missing\)", text)  # inv 400 raw at 40 Mbit/s failed entirely
    rows = {(r["op"], r["size"], r["rate_mbps"], r["method"]): r for r in read_csv(out / "cells.csv")}
    assert rows[("inv", "400", "40.0", "raw")]["missing"] == "true"


def test_stale_figures_are_removed_and_no_plots_means_no_images(tmp_path):
    run_dir = tmp_path / "hm"
    shutil.copytree(FIXTURE, run_dir)
    (run_dir / "analysis").mkdir()
    (run_dir / "analysis" / "decisions-old.svg").write_text("<svg/>")
    out = analyze(run_dir, plots=False, out=StringIO())
    assert not list(out.glob("*.svg")) and not list(out.glob("*.png"))
    page = (out / "report.html").read_text()
    assert "<img" not in page and "Plots were not made" in page and "No manifest.json" in page


def test_plots_survive_missing_cells_n1_no_json_and_no_baseline(tmp_path):
    """The hand-made run has n=1 cells, missing cells and a size with no json; drop size 200's baseline too."""
    run_dir = tmp_path / "hm"
    shutil.copytree(FIXTURE, run_dir)
    text = (run_dir / "trials.csv").read_text().splitlines()
    kept = [line for line in text if ",200,float64,,local," not in line]
    (run_dir / "trials.csv").write_text("\n".join(kept) + "\n")
    run = load_run(run_dir)
    cells = cell_table(run.trials)
    assert cells[cells["size"] == 200]["offload"].isna().all()
    out = run_dir / "analysis"
    out.mkdir()
    plots = make_plots(cells, decision_vectors(cells), cumulative_penalties(cells), out, workers=1)
    assert len(plots) == 2 + 1 + 4 + 1
    assert all(p.png.read_bytes().startswith(PNG_MAGIC) and p.svg.stat().st_size > 0 for p in plots)
    summary = StringIO()
    analyze(run_dir, plots=False, out=summary)
    assert "warning: mul 200 has no successful local trial" in summary.getvalue()


def test_a_run_without_json_has_no_json_ratio_row(tmp_path):
    run_dir = write_synthetic_run(
        tmp_path / "nojson", sizes=(200,), rates=(10, 20), methods=("raw", "msgpack"), reps=2
    )
    out = analyze(run_dir, out=StringIO())
    rows = read_csv(out / "cells.csv")
    assert {r["json_ratio"] for r in rows} == {""}
    assert (out / "ratios-mul.png").read_bytes().startswith(PNG_MAGIC)
