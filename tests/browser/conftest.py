"""Fixtures of the browser tests: a report page rendered in headless Chromium (Debian's `chromium`, which
`scripts/test.sh` installs), and what a reader would see wrong in it.

No Python browser driver: the page is copied with a script (`page_check.js`) that measures it once it has
loaded and writes the result into the page, and `chromium --dump-dom` prints the page. The copy lives in
the test's own directory and resolves the page's relative links against the report's directory (a
`<base>`), so nothing is written beside the report. Without Chromium the tests are skipped, but in CI
(CI=true: `scripts/test.sh` installs it, so its absence is a broken setup) they fail.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

CHECK_SCRIPT = Path(__file__).with_name("page_check.js")
WINDOW = "1280,800"  # the first screen the page must make sense in
FLAGS = [
    "--headless",
    "--no-sandbox",  # Chromium refuses to run as root otherwise; the page is our own local file
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    f"--window-size={WINDOW}",
    "--virtual-time-budget=5000",  # let the page load (images included) before the DOM is dumped
    "--dump-dom",
]
MAX_FIRST_SCREEN_ROWS = 10


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: renders a page in headless Chromium (tests/browser)")


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser's path; skips without one, but fails in CI, whose test command installs it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    fix = "install it: apt-get install -y --no-install-recommends chromium (scripts/test.sh does, as root)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"chromium is not installed, and CI needs the browser tests to run ({fix})")
    pytest.skip(f"chromium is not installed ({fix})")


@pytest.fixture
def measure(chromium, tmp_path) -> Callable[[Path], dict]:
    """`measure(report)`: what `page_check.js` measured on the rendered page."""

    def run(report: Path) -> dict:
        page = report.read_text(encoding="utf-8")
        base = f'<base href="{report.parent.resolve().as_uri()}/">'
        script = f"<script>{CHECK_SCRIPT.read_text()}</script>"
        page = page.replace("<head>", "<head>" + base, 1)
        page = page[: page.rindex("</body>")] + script + "</body></html>\n"
        copy = tmp_path / f"check-{report.parent.name}.html"
        copy.write_text(page, encoding="utf-8")
        profile = tmp_path / "chromium-profile"
        command = [chromium, *FLAGS, f"--user-data-dir={profile}", copy.as_uri()]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
        found = re.findall(r'<pre id="browser-check">(\{.*?\})</pre>', proc.stdout, re.S)
        if not found:
            raise AssertionError(
                f"chromium printed no measurement of {report} (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
            )
        return json.loads(html.unescape(found[-1]))  # the page's last element: the script's

    return run


@pytest.fixture
def check_page(measure) -> Callable[[Path], tuple[dict, list[str]]]:
    """`check_page(report)`: what `page_check.js` measured, and what a reader of the page would find
    wrong in it, one line each (none: [])."""

    def check(report: Path) -> tuple[dict, list[str]]:
        seen = measure(report)
        found = []
        if seen["viewport"][0] != int(WINDOW.split(",")[0]):
            found.append(f"the page was laid out {seen['viewport'][0]} px wide, not {WINDOW}")
        if not seen["firstScreenFigures"]:
            found.append("the first screen (1280 x 800) holds no figure that has loaded")
        for t in seen["firstScreenTables"]:
            if t["rows"] > MAX_FIRST_SCREEN_ROWS:
                found.append(f"the first screen shows {t['rows']} rows of a table: {t['text']!r}")
        found += [f"an image does not load: {name}" for name in seen["brokenImages"]]
        found += [
            f"a link leads to no file: {path}" for path in seen["localFiles"] if not Path(path).exists()
        ]
        found += [f"a link leads to no element of the page: {a}" for a in seen["missingAnchors"]]
        found += [f"a link leaves the page's directory: {url}" for url in seen["otherLinks"]]
        return seen, found

    return check
