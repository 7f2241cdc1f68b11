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
        # The commands a base install runs: attach (and its tour), bench --endpoint, report, replay, serve attach.
        [f"tui_app.commands.{name}" for name in ("attach", "serving_bench", "report", "replay", "serve", "demo")],
        ["tui_app.cli"],
    ],
)
def test_what_watches_servers_loads_no_torch(packages):
    count, bad = loaded(packages, ["torch", "transformers", "accelerate"])
    assert count >= len(packages) and bad == []


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
