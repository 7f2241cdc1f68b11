"""The doc-test: every shell command in the README and the guides (docs/*.md), so the docs cannot rot.

Each `sh` block's commands are read as a user would type them (a `\\` continues a line, `#` starts a
comment, `&&` chains two). Every tokentop command line is parsed by tokentop's own parser, its
placeholders (URL, FILE, N, [optional] parts) filled in: a renamed or removed option or subcommand
fails here. A block marked `<!-- doc-test: run -->` (`run, exit N` where the command's exit status
is N) is run for real, headless, on the default model; `run in a terminal`, the TUI in a real
terminal (tmux), until its first run is done, then `q`. Every other command must stand in a block
marked `<!-- doc-test: not run: REASON -->` saying why it is not run here (a GPU, a server, a
cluster, the reader's own files, minutes of runs) and what runs it instead; tokentop's are parsed there too.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tui_app.cli import normalized, parse

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*doc-test:\s*(run(?:,\s*exit\s+(\d+)| in a terminal)?|not run:\s*(.+?))\s*-->")
# What a synopsis names, as a real value: the parser checks the options, not that the file exists.
PLACEHOLDERS = {
    "URL": "http://127.0.0.1:8000",
    "URL_A": "http://127.0.0.1:8000",
    "URL_B": "http://127.0.0.1:8001",
    "FILE": "session.jsonl",
    "SCRIPT.toml": "talk.toml",
    "N": "2",
    "M": "model",
    "DIR": "pictures",
}
TOKENTOP = ("tokentop", ".venv/bin/tokentop")


@dataclass(frozen=True)
class Command:
    where: str  # file:line
    words: list[str]
    run: bool
    exit: int
    not_run: str | None
    terminal: bool = False  # run as the TUI, in a terminal

    def __str__(self) -> str:
        return f"{self.where}: {shlex.join(self.words)}"


def blocks(path: Path):
    """(first line number, lines, marker) of each sh block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            marker = MARKER.search(lines[i - 1]) if i else None
            end = lines.index("```", i + 1)
            yield i + 2, lines[i + 1 : end], marker
            i = end
        i += 1


def commands() -> list[Command]:
    out = []
    for path in DOCS:
        for first, lines, marker in blocks(path):
            text = "\n".join(lines).replace("\\\n", " ")
            for k, line in enumerate(text.splitlines()):
                words = shlex.split(line, comments=True)
                while words:  # `a && b`: each its own command
                    cut = words.index("&&") if "&&" in words else len(words)
                    out.append(
                        Command(
                            f"{path.relative_to(ROOT)}:{first + k}",
                            words[:cut],
                            bool(marker and marker.group(1).startswith("run")),
                            int(marker.group(2) or 0) if marker and marker.group(2) else 0,
                            marker.group(3) if marker else None,
                            bool(marker and marker.group(1) == "run in a terminal"),
                        )
                    )
                    words = words[cut + 1 :]
    return out


def tokentop_args(words: list[str]) -> list[str] | None:
    """The arguments after `tokentop`, past an `ssh -t HOST` and VAR=value before it; None: not tokentop."""
    if words[:2] == ["ssh", "-t"]:
        words = words[3:]
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if not words or words[0] not in TOKENTOP:
        return None
    return words[1:]


def filled(args: list[str]) -> list[str]:
    """A synopsis as a command line: [optional] parts and each `a | b` alternative taken, `...` dropped, placeholders filled."""
    out = []
    for word in args:
        word = word.strip("[]")
        if word in ("|", "...", "") or word == "ARGS":
            continue
        out.append(PLACEHOLDERS.get(word, word))
    return out


ALL = commands()


def test_the_docs_have_commands_and_every_block_marker_is_read():
    assert len(ALL) > 40 and any(c.run for c in ALL)
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        assert len(MARKER.findall(text)) == text.count("doc-test:"), f"{path.name}: a doc-test marker that does not read"


@pytest.mark.parametrize("cmd", ALL, ids=str)
def test_each_command_is_tokentop_s_own_or_says_why_it_cannot_run_here(cmd):
    args = tokentop_args(cmd.words)
    assert cmd.run or cmd.not_run, f"{cmd}: neither run here (`<!-- doc-test: run -->`) nor saying why not (`<!-- doc-test: not run: REASON -->`)"
    if args is None:
        return
    argv = normalized(filled(args))
    module, opts = parse(argv)  # argparse exits 2 on an option that does not exist
    assert module is not None and opts is not None, cmd


@pytest.mark.slow
@pytest.mark.parametrize("cmd", [c for c in ALL if c.run and not c.terminal], ids=str)
def test_each_runnable_command_runs_here_headless(cmd, tmp_path):
    args = tokentop_args(cmd.words)
    assert args is not None and ("--no-tui" in args or args[0] == "leakcheck"), f"{cmd}: a run marker on a command that would draw the TUI"
    tokentop = Path(sys.executable).with_name("tokentop")
    env = {**os.environ, "TOKENTOP_DATA": str(tmp_path)}
    done = subprocess.run([str(tokentop), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == cmd.exit, f"{cmd}: exit {done.returncode}, not {cmd.exit}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("cmd", [c for c in ALL if c.terminal], ids=str)
def test_each_tui_command_draws_its_first_run_and_quits_in_a_terminal(cmd, tmp_path):
    """The TUI as a user's terminal shows it (160×45, tmux): the first run done on the screen, `q`, exit 0."""
    from benchmarks.common.tmux import TmuxApp, runs_finished

    args = tokentop_args(cmd.words)
    assert args is not None and "--no-tui" not in args, f"{cmd}: a terminal marker on a headless command"
    app = TmuxApp(f"doc-{os.getpid()}", args, env={"TOKENTOP_DATA": str(tmp_path)})
    try:
        app.wait_for(lambda screen: runs_finished(screen) >= 1 or "TOKENTOP-EXIT=" in screen or "engine exited" in screen, timeout=240)
        first = app.pane()
        app.keys("q")
        app.wait_for(lambda screen: "TOKENTOP-EXIT=" in screen, timeout=20)
        screen = app.pane()
    finally:
        app.close(wait=False)
    assert runs_finished(first) >= 1, f"{cmd}: no run finished:\n{first}"
    assert "TOKENTOP-EXIT=0" in screen and "Traceback" not in screen, f"{cmd}:\n{screen}"
