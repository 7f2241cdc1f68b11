"""Reading a terminal's screen (tmux capture-pane text) against the events behind it: how far behind
the engine what the screen shows was at the moment it was captured.

The oracle is the text pane: the text of the run in progress is on screen up to some character;
the recording says when the engine produced each step. The screen at time T is stale by the time
since the engine produced the first text that is not on it yet (0 when it shows all there was).
Whitespace is left out on both sides: the pane wraps lines at spaces.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

from monitors.events import Step

RUN_STATUS = re.compile(r"run (\d+): generating")
TAIL = 24  # characters (whitespace left out) of the screen's text that place it in the run's text


def text_pane(screen: str) -> str:
    """The tokens pane's text (wide layout: the left pane), its lines joined."""
    lines = screen.splitlines()
    top = next((i for i, line in enumerate(lines) if line.startswith("╭─ tokens")), None)
    if top is None:
        return ""
    right = lines[top].index("╮")
    out = []
    for line in lines[top + 1 :]:
        if line.startswith("╰"):
            break
        out.append(line[1:right])
    return "\n".join(out)


@dataclass
class RunText:
    """A run's text without whitespace, and when each character of it was produced."""

    chars: str
    ends: list[int]  # per step: the length of chars once it was in
    times: list[int]  # per step: its t_ns


def run_texts(events) -> dict[int, RunText]:
    runs: dict[int, RunText] = {}
    for ev in events:
        if isinstance(ev, Step) and not ev.segment:
            r = runs.setdefault(ev.run_id, RunText("", [], []))
            r.chars += "".join(ev.text.split())
            r.ends.append(len(r.chars))
            r.times.append(ev.t_ns)
    return runs


def staleness(screen: str, t_ns: int, runs: dict[int, RunText]) -> float | None:
    """Seconds the screen captured at t_ns was behind the engine, or None where it cannot be told
    (no run in progress on the status line, or the text not yet long enough to place)."""
    m = RUN_STATUS.search(screen.splitlines()[0] if screen else "")
    if m is None or int(m.group(1)) not in runs:
        return None
    run = runs[int(m.group(1))]
    shown = "".join(text_pane(screen).split())
    tail = shown[-TAIL:]
    if len(tail) < TAIL:
        return None
    k = bisect_right(run.times, t_ns)
    produced = run.ends[k - 1] if k else 0  # the run's text the engine had made by t_ns
    at = run.chars.rfind(tail, 0, produced)  # a repeated phrase: the latest place it can be
    if at < 0:
        return None
    end = at + TAIL  # the screen shows the run's text up to here
    k = bisect_right(run.ends, end)  # the first step that added text beyond it
    if k >= len(run.times) or run.times[k] >= t_ns:
        return 0.0
    return (t_ns - run.times[k]) / 1e9
