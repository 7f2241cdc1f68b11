"""Each test file's seconds in one run, kept in tests/durations.json so that a parallel tier starts
its longest files first. pytest-xdist's `--dist loadfile` keeps a file on one worker (its module
fixtures: a model, a server) and by default orders files by their count of tests, so a file of
one long test (Gemma's compile, 150 s) started last and ended the tier alone. Longest first is the
classic rule for packing jobs onto machines: no file starts after one that takes longer.

    python -m pytest -n 2 --dist loadfile ... --junitxml=run.xml -o junit_duration_report=total
    python -m tests.helpers.durations run.xml "2026-11-30, <commit>, <CPU>"   # rewrites the file

A file it does not name (a new one) starts after those it names; stale figures change only the
order, never what runs.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

FILE = Path(__file__).resolve().parents[1] / "durations.json"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load(path: Path = FILE) -> dict[str, float]:
    try:
        return json.loads(path.read_text())["files"]
    except (OSError, ValueError, KeyError):  # no file, or a broken one: the order is xdist's own
        return {}


def from_junit(xml: str) -> dict[str, float]:
    seconds: Counter[str] = Counter()
    for case in ET.parse(xml).getroot().iter("testcase"):
        module = case.get("classname", "")
        # classname is the dotted module, with a class's name after it where the test is a method
        parts = module.split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        seconds["/".join(parts) + ".py"] += float(case.get("time", 0))
    return {name: round(s, 1) for name, s in seconds.most_common()}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.helpers.durations RUN.xml 'DATE, COMMIT, CPU'", file=sys.stderr)
        return 2
    files = from_junit(argv[0])
    FILE.write_text(json.dumps({"measured": argv[1], "files": files}, indent=1) + "\n")
    print(f"{len(files)} files, {sum(files.values()):.0f} s, into {FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
