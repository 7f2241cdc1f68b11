"""Prompt presets for the classic short-vs-long prompt experiment, and the fixed reference text
whose perplexity shows what a lever does to the model's quality."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

PRESETS = ("short", "long", "file")
SHORT_PROMPT = "Write a short story about a robot who learns to paint."


def data_text(name: str) -> str:
    return (files("tui_app") / "data" / name).read_text(encoding="utf-8")


def reference_text() -> str:
    return data_text("reference.txt")


def preset_prompt(preset: str, prompt_file: str | None = None) -> str:
    if preset == "short":
        return SHORT_PROMPT
    if preset == "long":
        return data_text("long_prompt.txt")
    if preset == "file":
        if not prompt_file:
            raise ValueError("the 'file' prompt preset needs --prompt-file")
        return read_prompt_file(prompt_file)
    raise ValueError(f"unknown prompt preset {preset!r}: expected one of {', '.join(PRESETS)}")


def read_prompt_file(path: str) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read prompt file {path}: {exc.strerror or exc}") from None
    if b"\x00" in raw:
        raise ValueError(f"prompt file {path} looks binary (it contains NUL bytes); give a text file")
    # Invalid UTF-8 is replaced rather than refused: a prompt with a stray byte is still a prompt.
    return raw.decode("utf-8", errors="replace")
