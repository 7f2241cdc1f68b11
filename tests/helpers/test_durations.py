"""The order the parallel tiers start their files in (tests/helpers/durations.py): a junit report's
seconds summed per file, a file it names started before those it does not, and the longest first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import durations

REPORT = """<testsuites><testsuite name="pytest">
<testcase classname="tests.engine.test_gemma" name="test_a" time="150.5"/>
<testcase classname="tests.ui.test_look" name="test_b" time="1.25"/>
<testcase classname="tests.ui.test_look" name="test_c" time="2.0"/>
<testcase classname="tests.core.test_x.TestThing" name="test_d" time="4.0"/>
</testsuite></testsuites>"""


def test_a_reports_seconds_are_summed_per_file_longest_first(tmp_path):
    xml = tmp_path / "run.xml"
    xml.write_text(REPORT)
    assert durations.from_junit(str(xml)) == {"tests/engine/test_gemma.py": 150.5, "tests/core/test_x.py": 4.0, "tests/ui/test_look.py": 3.2}


def test_a_missing_or_broken_file_leaves_the_order_alone(tmp_path):
    assert durations.load(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert durations.load(tmp_path / "bad.json") == {}


def test_the_kept_figures_name_files_that_exist():
    root = Path(durations.FILE).parents[1]
    files = durations.load()
    assert files and all((root / name).is_file() for name in files), [n for n in files if not (root / n).is_file()]


def test_collection_starts_the_longest_file_first_and_one_it_does_not_name_after_those_it_does():
    # A fresh pytest collecting with the kept figures: the order pytest-xdist takes (make test tells
    # it not to reorder). The ssh session is all serial, so no parallel tier's run names it.
    unnamed = "tests/system/test_ssh.py"
    seconds = durations.load()
    assert unnamed not in seconds
    chosen = [unnamed, "tests/core/test_ledger.py", "tests/engine/test_gemma.py", "tests/ui/test_look.py"]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *chosen],
        cwd=Path(durations.FILE).parents[1],
        capture_output=True,
        text=True,
    )
    files = list(dict.fromkeys(line.split("::")[0] for line in out.stdout.splitlines() if "::" in line))
    assert files[-1] == unnamed and len(files) == 4, out.stdout
    assert files[:3] == sorted(files[:3], key=lambda f: -seconds[f]) and files[0] == "tests/engine/test_gemma.py", files
