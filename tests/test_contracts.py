"""The import contracts (pyproject.toml, `make check`) and what they are for, checked at run time:
the base install (no torch) must start every command that watches a server, replays or reports."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LOADED = """
import importlib, pkgutil, sys
names = []
for name in {packages!r}:
    mod = importlib.import_module(name)
    names.append(name)
    if hasattr(mod, "__path__"):
        for info in pkgutil.walk_packages(mod.__path__, name + "."):
            importlib.import_module(info.name)
            names.append(info.name)
print(len(names), *[m for m in {forbidden!r} if m in sys.modules])
"""


def loaded(packages: list[str], forbidden: list[str]) -> tuple[int, list[str]]:
    """(modules imported, the forbidden ones among what they loaded), in a fresh interpreter."""
    code = LOADED.format(packages=packages, forbidden=forbidden)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    count, *bad = r.stdout.split()
    return int(count), bad


def test_monitors_load_no_ui_and_no_app():
    count, bad = loaded(["monitors"], ["textual", "rich", "tui_app", "torch", "transformers"])
    assert count > 10 and bad == []


def test_core_loads_no_textual_rich_or_torch():
    count, bad = loaded(["tui_app.core"], ["textual", "rich", "torch", "transformers", "accelerate", "numpy", "matplotlib"])
    assert count >= 7 and bad == []


@pytest.mark.parametrize(
    "packages",
    [
        ["tui_app.ui", "tui_app.attach"],
        # The commands a base install runs: attach (and its tour), bench --endpoint (serving/ whole: its sweep and --live), report, replay, serve attach.
        [f"tui_app.commands.{name}" for name in ("attach", "serving", "report", "replay", "serve", "demo")],
        ["tui_app.cli"],
    ],
)
def test_what_watches_servers_loads_no_torch(packages):
    count, bad = loaded(packages, ["torch", "transformers", "accelerate"])
    assert count >= len(packages) and bad == []


def test_import_tokentop_in_a_notebook_loads_nothing_until_watch_is_called():
    count, bad = loaded(["tokentop"], ["tui_app", "textual", "rich", "torch", "transformers", "monitors"])
    assert count == 1 and bad == []


def test_import_linter_contracts_hold():
    exe = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    r = subprocess.run([exe], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in (
        "monitors is a UI-free library",
        "core is free of Textual, Rich and torch",
        "ui, attach and monitors are free of torch and transformers",
        "modules in layers, the CLI on top, monitors at the bottom",
        "no import cycle within any package",
    ):
        assert f"{name} KEPT" in r.stdout, r.stdout


def test_the_command_line_is_parsed_without_torch_or_textual():
    """Every subcommand's parser is built (tokentop --help) from modules that load neither."""
    code = (
        "import sys, tui_app.cli as c; c.build_parser(); c.serving_bench_parser(); print(*[m for m in ('torch', 'textual', 'matplotlib') if m in sys.modules])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr


def test_a_command_line_loads_only_the_command_it_names():
    """`tokentop probe` imports probe's module, not the ten others (half a second of CPU at every
    start, the fleet's HTTP clients most of it); serve's takes attach's, whose options it checks."""
    code = (
        "import sys, tui_app.cli as c; c.parse(sys.argv[1:]);"
        "print(*sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.count('.') == 2 and m.startswith('tui_app.commands.')"
        " and m.rsplit('.', 1)[1] in c.COMMANDS), 'aiohttp' in sys.modules)"
    )
    for argv, loaded in ((["probe"], "probe False"), (["serve", "--port", "8000"], "attach serve True"), (["replay", "x.jsonl"], "replay False")):
        r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == loaded, (argv, r.stdout + r.stderr)


def test_the_architecture_page_names_every_module_and_only_those_that_exist():
    """docs/architecture.md is the newcomer's map: every file of the packages and the benchmarks is
    on it, and every module it names is one that exists."""
    import re

    def files(*paths: str) -> list[str]:  # tracked, and new ones not yet added
        git = ["git", "ls-files", "--cached", "--others", "--exclude-standard", *paths]
        return subprocess.run(git, capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()

    tracked = files("tui_app", "monitors", "benchmarks")
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        page = f.read()
    names = {os.path.basename(f) for f in tracked if os.path.basename(f) not in ("__init__.py", "py.typed")}
    missing = sorted(n for n in names if not re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", page))
    assert not missing, f"docs/architecture.md does not name {missing}"
    named = set(re.findall(r"[\w/]*\w\.(?:py|tcss|cpp|h)\b", page)) - {"llama.cpp"}  # the server, not a file
    everything = files()
    gone = sorted(n for n in named if not any(f == n or f.endswith("/" + n) for f in everything))
    assert not gone, f"docs/architecture.md names what does not exist: {gone}"
