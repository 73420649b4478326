"""The report's HTML building blocks: escaping, tables, key-value lists, figures and collapsed sections.

Only what turns data into markup lives here; what the page says and in which order is `analysis.report`.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import pandas as pd

from analysis.decisions import format_mbps
from analysis.plots import Plot
from analysis.tables import csv_frame

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; margin-bottom: .3em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em;
  margin-top: 1.6em; } h3 { margin: 1.2em 0 .4em; }
p.lead { font-size: 15px; max-width: 75em; margin: .3em 0; }
table { border-collapse: collapse; font-size: 12px; margin: .5em 0 1em; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
th { background: #f3f3f3; } td.k, th.k { text-align: left; }
tr.missing td { background: #fde0e0; } tr.bad td { background: #fde0e0; }
pre { background: #f7f7f7; padding: .6em; overflow-x: auto; font-size: 12px; }
figure { margin: 0 0 1em; } figure img { width: 100%; border: 1px solid #eee; }
figcaption { font-size: 13px; color: #333; } nav { margin: .6em 0; } nav a { margin-right: 1em; }
.figures { display: grid; gap: .5em 1em; grid-template-columns: repeat(auto-fill, minmax(380px, 1fr)); }
.figures.large { grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); }
.note { font-size: 13px; color: #555; } .wide { overflow-x: auto; }
details { margin: .4em 0; border: 1px solid #e4e4e4; border-radius: 4px; padding: .2em .6em; }
details > summary { cursor: pointer; font-weight: 600; padding: .2em 0; }
"""


def e(value) -> str:
    """Text as HTML, escaped."""
    return html.escape(str(value))


def table(frame: pd.DataFrame, classes: list[str] | None = None) -> str:
    """A frame as a table, its values as the CSVs write them; `classes`: one per row ("" for none)."""
    if frame.empty:
        return "<p>(none)</p>"
    text = csv_frame(frame).to_html(
        index=False, na_rep="", float_format=lambda v: f"{v:.4g}", escape=True, border=0
    )
    head, sep, body = text.partition("<tbody>")
    rows = body.split("<tr>")
    if classes and sep and len(rows) == len(classes) + 1:  # else leave the rows plain, not mislabelled
        body = rows[0] + "".join(
            (f'<tr class="{c}">' if c else "<tr>") + r for c, r in zip(classes, rows[1:], strict=True)
        )
        text = head + sep + body
    return text


def kv(data: dict) -> str:
    """A two-column table: each key and its value."""
    rows = "".join(
        f'<tr><th class="k">{e(k)}</th><td class="k">{e(plain(v))}</td></tr>' for k, v in data.items()
    )
    return f"<table>{rows}</table>"


def plain(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value, default=str)
    return str(value)


def flatten(data: dict, prefix: str = "") -> dict:
    """Nested dicts as one level, keys joined by dots (`experiment.validation.retries`)."""
    flat = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def records(items: list, mark_bad: bool = False) -> str:
    """A list of records as a table (one row each, nested keys flattened); `mark_bad` highlights the rows
    whose `ok` is false."""
    if not items:
        return "<p>(empty)</p>"
    if not all(isinstance(i, dict) for i in items):
        return f"<pre>{e(json.dumps(items, indent=2, default=str))}</pre>"
    frame = pd.DataFrame([flatten(i) for i in items])
    for column in frame.columns:
        if frame[column].map(lambda v: isinstance(v, list)).any():
            frame[column] = frame[column].map(
                lambda v: json.dumps(v, default=str) if isinstance(v, list) else v
            )
    classes = None
    if mark_bad and "ok" in frame.columns:
        classes = ["bad" if v is False else "" for v in frame["ok"]]
    if "rate_mbps" in frame.columns:
        frame["rate_mbps"] = frame["rate_mbps"].map(
            lambda r: format_mbps(r) if isinstance(r, int | float) else r
        )
    return table(frame.astype(object).where(frame.notna(), ""), classes)


def section(heading: str, note: str, frame: pd.DataFrame, highlight: pd.Series | None = None) -> list[str]:
    """A heading, a note saying how to read the table, and the table (rows where `highlight` is true
    marked as the report marks missing cells)."""
    classes = None if highlight is None else ["missing" if h else "" for h in highlight]
    return [heading, f'<p class="note">{note}</p>', table(frame, classes)]


def details(title: str, body: str | list[str], ident: str = "") -> str:
    """A collapsed part of the page: `title` shows, `body` opens on a click (or when a link leads to
    `ident` or to an element inside)."""
    body = "\n".join(body) if isinstance(body, list) else body
    anchor = f' id="{e(ident)}"' if ident else ""
    return f"<details{anchor}><summary>{title}</summary>\n{body}\n</details>"


def image_src(png: Path, embed: bool) -> str:
    """An <img> source: the PNG's bytes as data, or its name beside the report."""
    if not embed:
        return e(png.name)
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def figure(plot: Plot, caption: str = "", embed: bool = True) -> str:
    """A figure as PNG with the id other parts link to (`fig-STEM`); its caption is `caption` (what it
    shows, as HTML) then its title and a link to its SVG."""
    said = f"{caption} " if caption else ""
    return (
        f'<figure id="fig-{e(plot.png.stem)}"><img src="{image_src(plot.png, embed)}" alt="{e(plot.title)}">'
        f'<figcaption>{said}<span class="note">{e(plot.title)} (<a href="{e(plot.svg.name)}">SVG</a>)'
        "</span></figcaption></figure>"
    )


def figures(items: list[str], large: bool = False) -> str:
    """Figures side by side as the page's width allows (`large`: fewer, wider ones)."""
    return f'<div class="figures{" large" if large else ""}">' + "\n".join(items) + "</div>"


def write_page(path: Path, title: str, parts: list[str]) -> Path:
    """One self-contained page: the shared style, then the parts in order (empty ones left out)."""
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(p for p in parts if p)
        + "\n</body></html>\n"
    )
    path.write_text(page, encoding="utf-8")
    return path
