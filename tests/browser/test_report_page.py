"""The report as a reader opens it, in headless Chromium at 1280 x 800: the first screen holds a figure
and no long table, every figure loads and every link leads somewhere. Checked on a stored run analysed
now (figures embedded, as `python -m analysis` writes them, and linked, as a shipped reproduction has
them), on the reproductions as shipped, and on a page damaged on purpose, which must fail."""

from __future__ import annotations

import re
import shutil
from io import StringIO

import pytest

from analysis import analyze
from tests.helpers import REPO

pytestmark = pytest.mark.browser

STORED = REPO / "tests" / "data" / "runs" / "v3-tiny"
SHIPPED = sorted(p.parent for p in (REPO / "reproductions").glob("*/analysis/report.html"))


@pytest.fixture(scope="module", params=[True, False], ids=["embedded", "linked"])
def report(request, tmp_path_factory):
    """The stored run's report, analysed now, its figures embedded or linked."""
    run = shutil.copytree(STORED, tmp_path_factory.mktemp("runs") / STORED.name)
    return analyze(run, out=StringIO(), embed=request.param) / "report.html"


def test_the_first_screen_shows_a_figure_and_every_figure_and_link_works(report, check_page):
    seen, problems = check_page(report)
    assert not problems, "\n".join(problems)
    assert seen["images"] == len(list(report.parent.glob("*.png"))) > 0  # every figure the analysis drew


@pytest.mark.parametrize("shipped", SHIPPED, ids=[p.parent.name for p in SHIPPED])
def test_a_shipped_report_reads_as_well(shipped, check_page):
    _, problems = check_page(shipped / "report.html")
    assert not problems, "\n".join(problems)


def test_a_damaged_page_is_caught(report, check_page):
    """The check can fail: on the report laid out as it was before (everything to look up first, open),
    with the cells table on top, an image that is not there and links to nowhere."""
    page = report.read_text()
    start, end = page.index('<h2 id="details">'), page.rindex("</body>")
    reference = page[start:end].replace("<details", "<details open")
    cells = re.search(r'<div class="wide">.*?</div>', reference, re.S).group(0)
    broken = '<img src="gone.png" alt="gone"><a href="gone.csv">x</a><a href="#gone">y</a>'
    damaged = (page[:start] + page[end:]).replace("<body>\n", "<body>\n" + cells + reference + broken, 1)
    bad = report.parent / "damaged.html"
    bad.write_text(damaged)
    _, problems = check_page(bad)
    assert "the first screen (1280 x 800) holds no figure that has loaded" in problems
    assert any(re.match(r"the first screen shows \d+ rows of a table", p) for p in problems), problems
    assert "an image does not load: gone" in problems
    assert f"a link leads to no file: {report.parent.resolve() / 'gone.csv'}" in problems
    assert "a link leads to no element of the page: #gone" in problems
