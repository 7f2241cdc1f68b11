"""Whether this terminal can show the TUI at all: one line saying why not, before anything starts."""

from __future__ import annotations

import os
import sys


def cannot_draw() -> str | None:
    """Why there is no TUI here (no terminal: a pipe or a file; TERM=dumb: a terminal without
    cursor movement, like Emacs' shell), or None. TOKENTOP_FORCE_TUI (tests, `serve`) overrides."""
    if os.environ.get("TOKENTOP_FORCE_TUI"):
        return None
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return "no terminal here, so no TUI"
    if os.environ.get("TERM", "").strip().lower() == "dumb":
        return "TERM=dumb: this terminal cannot draw the TUI"
    return None
