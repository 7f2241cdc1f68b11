"""`tokentop report FILE -o report.html [--png DIR]`: a session recording, or a `tokentop bench -o json`
result, as one HTML page to paste into a pull request, a slide or a chat.

The page opens offline: figures are inline SVG drawn by matplotlib, the style sheet is inline, and it
has no script and no link out. A session's numbers come from the fold replay uses (Session.from_events)
and its table from the runs table's own columns, so the report cannot disagree with the app.
The figures of a session are session.py's, of a bench bench.py's, and page.py writes them; matplotlib is
imported only there, when a figure is drawn, so no other command pays for it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from tui_app.commands.report.bench import bench_report
from tui_app.commands.report.page import Report, ReportError, write_html, write_pngs
from tui_app.commands.report.session import session_report
from tui_app.commands.report.xray import serving_bench_report

PARSER = {"help": "a recording or a `bench -o json` result as one self-contained HTML page (and PNGs)"}


@dataclass(kw_only=True)
class Options:
    file: str
    output: str
    png: str | None


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a session recording (JSONL) or a `tokentop bench -o json` result")
    p.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default report.html)")
    p.add_argument("--png", metavar="DIR", default=None, help="also write each figure as a PNG into DIR")


def main(args: Options) -> int:
    from tui_app.core.options import EXIT_USAGE, require_extra

    require_extra("report")
    try:
        report = build(args.file)
        for note in report.notes:
            print(f"tokentop: {note}", file=sys.stderr)
        write_html(report, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
        if args.png:
            for path in write_pngs(report, args.png):
                print(f"wrote {path}", file=sys.stderr)
    except ReportError as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def build(path: str) -> Report:
    """The report for FILE, whichever of the two kinds it is (told apart by content, not by name)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot read {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ReportError(f"{p} is neither a tokentop recording nor a `tokentop bench -o json` result (not UTF-8 text)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None  # JSON lines: a recording, or nothing we know
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        if data["results"] and all(isinstance(r, dict) and "load" in r for r in data["results"]):
            return serving_bench_report(p, data)
        return bench_report(p, data)
    if data is not None and not (isinstance(data, dict) and "type" in data):
        raise ReportError(f"{p} is neither a tokentop recording nor a `tokentop bench -o json` result")
    return session_report(p)
