"""`p`: the anatomy of a decode step, each lever mix profiled since the app started side by side: a stacked
bar per mix (its step's time by part, on one scale), and the table of ms a step and shares."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Static

from tui_app.core.readings import PART_LABELS, anatomy_table, gpu_gaps_text, mlp_experts, trace_text

# A colour per part, in the stacked bars and beside each row's label, each one apart from its
# neighbours in both themes (look.py; the dark one's blue reads purple), each a terminal colour so
# that the light theme draws it dark enough; a part not named here (a compiled graph, a fused
# step's one op) is cyan.
COLOURS = {
    "embedding": "grey50",
    "attention": "yellow",
    "mlp": "green",
    "norms": "magenta",
    "lm_head": "blue",
    "sampling": "bright_yellow",
    "host_read": "red",
    "framework": "bright_white",
}
COLOUR = {PART_LABELS[part]: colour for part, colour in COLOURS.items()}
KEYS = " p or escape: close · p in the monitor profiles the next decode steps of the current levers"


class AnatomyScreen(Screen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,p,q", "dismiss", "close")]
    DEFAULT_CSS = """
    AnatomyScreen { background: $surface; }
    AnatomyScreen > #anatomy-body { height: 1fr; padding: 0 1; }
    AnatomyScreen > #anatomy-keys { height: 1; background: $panel; color: $text-muted; }
    """

    def __init__(self, session):
        super().__init__()
        self.session = session
        self.body = Static("", id="anatomy-body")

    def compose(self) -> ComposeResult:
        yield self.body
        yield Static(KEYS, id="anatomy-keys")

    def on_mount(self) -> None:
        self.show()

    def on_resize(self) -> None:
        self.show()

    def show(self) -> None:
        s = self.session
        routing = s.ready.routing if s.ready is not None else None
        self.body.update(render(list(s.anatomies.values()), max(40, self.size.width - 2), s.run_rooflines, s.bandwidth, routing))


def render(anatomies: list, width: int, rooflines: dict, bw=None, routing: dict | None = None) -> Text:
    """`rooflines`: run id → the verdict of the anatomy taken in that run (Session.run_rooflines);
    `bw` and `routing`, an MoE's: its MLP's experts read (readings.mlp_experts)."""
    out = Text()
    if not anatomies:
        return Text("no step has been profiled yet: p in the monitor profiles the next decode steps", style="dim")
    last = anatomies[-1]
    out.append(f"Anatomy of a decode step · torch.profiler, the host's clock · {trace_text(last)}\n", style="bold")
    rows = anatomy_table(anatomies)
    label_w = min(48, max(len(r[0]) for r in rows) + 1)
    slowest = max(ev.step_ms for ev in anatomies)
    bar_w = max(10, width - 26)
    for ev in anatomies:  # one scale for all: a faster mix's bar is shorter
        out.append(f"{ev.levers.label():<14.14} {ev.step_ms:7.2f} ms ")
        for label, cells in rows:
            n = round(cells[anatomies.index(ev)][0] / slowest * bar_w)
            out.append("█" * n, style=COLOUR.get(label, "cyan"))
        verdict = rooflines.get(ev.run_id)
        out.append("\n" + " " * 25 + (verdict.text if verdict else "its roofline verdict comes at its run's end") + "\n", style="italic")
    out.append("\n" + " " * (label_w + 2))
    for ev in anatomies:
        out.append(f"{ev.levers.label():>16.16}", style="bold")
    out.append("\n")
    for label, cells in rows:
        out.append("■ ", style=COLOUR.get(label, "cyan"))
        out.append(f"{label:<{label_w}.{label_w}}")
        for ms, share in cells:
            out.append(f"{ms:>8.2f} ms {share:>4.0%}")
        out.append("\n")
    for ev in anatomies:
        if line := mlp_experts(ev, rooflines.get(ev.run_id), bw, routing):
            out.append(f"\n{line}")
        if ev.gpu_busy_ms or ev.gpu_idle_ms:
            out.append(f"\n{ev.levers.label()}: {gpu_gaps_text(ev)}")
    out.append(f"\n{last.steps} decode steps a mix; framework: the step's time outside every part (Python between the modules, building inputs).", style="dim")
    if any(not any(p in ev.parts for p in ("attention", "mlp")) for ev in anatomies):
        out.append("\nUnder compile the modules are one graph: its row is the graph, beside the framework share.", style="dim")
    return out
