"""The page: a report's figures as inline SVG, its tables and notes, one HTML file with no script and
no link out; and each figure as a PNG. The colours and marks every figure shares."""

from __future__ import annotations

import html
import io
from dataclasses import dataclass, field
from pathlib import Path

from monitors.files import write_error, write_whole

MIB = 2**20
# Colours that stay apart in print and for the common colour-vision deficiencies (Okabe–Ito).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
REPREFILL = "#D55E00"
LEVER = "#7a4fa0"
LABELLED_RUNS = 24  # beyond this many runs, figures keep their marks but drop the words on them


class ReportError(Exception):
    """Input that cannot be reported on: one line that says why."""


@dataclass
class Figure:
    name: str  # file stem for --png and the element id
    title: str
    fig: object  # matplotlib.figure.Figure
    caption: str = ""


@dataclass
class Report:
    title: str
    meta: list[tuple[str, str]]
    figures: list[Figure]
    tables: list[str]  # HTML
    notes: list[str] = field(default_factory=list)


CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1f; margin: 2em auto; max-width: 1100px; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.15em; margin: 1.6em 0 0.4em; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 0.15em 1em; margin: 0.6em 0 1em; }
dl.meta dt { color: #666; }
dl.meta dd { margin: 0; }
p.note { background: #fff4e5; border-left: 4px solid #E69F00; padding: 0.4em 0.8em; }
figure { margin: 0 0 1.2em; }
figure svg { width: 100%; height: auto; }
figcaption { color: #444; font-size: 0.92em; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 0.9em; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #e3e3e3; white-space: nowrap; }
th { text-align: right; border-bottom: 2px solid #999; }
th:first-child, td.l { text-align: left; }
td.r { text-align: right; }
tr.segment td { color: #777; }
tr.segment td:first-child { padding-left: 1.6em; }
footer { color: #888; font-size: 0.85em; margin-top: 2em; }
"""


def svg_of(figure: Figure) -> str:
    import matplotlib

    buf = io.StringIO()
    # Text as paths: the page needs no font; a salt per figure keeps element ids unique on the page.
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": figure.name}):
        figure.fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]


def render(report: Report) -> str:
    meta = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in report.meta)
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in report.notes)
    figures = "".join(
        f'<figure id="{f.name}"><h2>{html.escape(f.title)}</h2>{svg_of(f)}<figcaption>{html.escape(f.caption)}</figcaption></figure>' for f in report.figures
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(report.title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{html.escape(report.title)}</h1><dl class="meta">{meta}</dl>{notes}{figures}{"".join(report.tables)}'
        "<footer>made by <code>tokentop report</code></footer></body></html>\n"
    )


def write_html(report: Report, path: str) -> None:
    text = render(report)
    try:
        write_whole(path, text)
    except OSError as exc:
        raise ReportError(f"{path} not written: {write_error(exc, path)}") from None


def write_pngs(report: Report, folder: str) -> list[Path]:
    out = Path(folder)
    paths = []
    path = out
    try:
        out.mkdir(parents=True, exist_ok=True)
        for f in report.figures:
            path = out / f"{f.name}.png"
            buf = io.BytesIO()
            f.fig.savefig(buf, format="png", dpi=120, metadata={"Software": None})
            write_whole(path, buf.getvalue())
            paths.append(path)
    except OSError as exc:
        raise ReportError(f"the PNGs were not written into {out}: {write_error(exc, path)}") from None
    return paths
