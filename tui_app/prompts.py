"""Prompt presets for the classic short-vs-long prompt experiment and for prompt lookup, and the
fixed reference text whose perplexity shows what a lever does to the model's quality.

Chosen by the default model's greedy output (64 tokens): notes on decoding draw a loop ("The
time to first token is called the time to first token…"); a gardener's year (367 tokens with the
chat template) draws a readable answer. The story preset
asks for a retelling, which the model writes nearly word for word from the prompt: what prompt
lookup proposes from (53 of 74 proposals accepted over 64 tokens, 9 of 9 over 12), where
"summarize it" drew 34 of 194 and "continue it" 52 of 83.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

PRESETS = ("short", "long", "story", "file")
SHORT_PROMPT = "How do I make a good cup of tea? Explain briefly."


def data_text(name: str) -> str:
    return (files("tui_app") / "data" / name).read_text(encoding="utf-8")


def reference_text() -> str:
    return data_text("reference.txt")


def preset_prompt(preset: str, prompt_file: str | None = None) -> str:
    if preset == "short":
        return SHORT_PROMPT
    if preset == "long":
        return data_text("long_prompt.txt")
    if preset == "story":
        return data_text("story_prompt.txt")
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
