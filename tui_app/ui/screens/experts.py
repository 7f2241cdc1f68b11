"""`E`: an MoE's routing, live. A heatmap of layers × experts (each cell the expert's share of its
layer's positions, against the layer's busiest), each layer's imbalance (max ÷ mean) and idle
experts, the hottest experts, and the weights the last step really read beside one token's k/n.
`w` switches between the run so far and its last steps. Layers or experts fold into groups where
the terminal is too small for one a cell; `--ascii` draws the heat in ASCII."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Static

from monitors.routing import idle_share, imbalance, step_weight_bytes
from tui_app.attach.experts import RECORDERS
from tui_app.core import fmt

RAMP = " ·░▒▓█"  # no load, then fifths of the row's busiest
RAMP_ASCII = " .:=*#"  # the ascii filter would draw every shade as one character
HEAT = ("", "grey50", "cyan", "green", "yellow", "bold red")
WINDOW_STEPS = 64
KEYS = " E or escape: close · w: the run so far / its last steps"
SIDE = 28  # the right-hand column: "  1.95× max/mean   0% idle"


def _groups(n: int, room: int) -> list[range]:
    """n items in at most `room` consecutive groups of equal size (the last shorter)."""
    size = max(1, -(-n // max(1, room)))
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


def _label(group: range, prefix: str) -> str:
    return f"{prefix}{group.start}" if len(group) == 1 else f"{prefix}{group.start}–{group[-1]}"


def heatmap(counts: list[list[int]], width: int, rows: int, ascii_only: bool) -> list[Text]:
    """The layers × experts map in at most `rows` lines of `width` cells, folding where needed:
    a folded cell is its experts' summed count; a folded row, its layers' summed counts, with the
    worst of their imbalances."""
    ramp = RAMP_ASCII if ascii_only else RAMP
    layers, experts = len(counts), len(counts[0])
    label_w = 7
    room = width - label_w - SIDE
    cols = _groups(experts, room)
    cell = max(1, min(4, room // len(cols)))  # few experts: wider cells, numbered
    lines = []
    if cell >= 2 and rows > 1 and len(cols) == experts and len(str(experts - 1)) < cell:
        lines.append(Text(" " * label_w + "".join(f"{e:<{cell}}" for e in range(experts)), style="dim"))
        rows -= 1
    for group in _groups(layers, rows):
        summed = [sum(counts[li][e] for li in group) for e in range(experts)]
        cells = [sum(summed[e] for e in g) for g in cols]
        top = max(cells) or 1
        line = Text(f"{_label(group, 'L'):<{label_w}}")
        for c in cells:
            level = 0 if c == 0 else 1 + min(4, c * 5 // (top + 1))
            line.append(ramp[level] * max(1, cell - 1) + " " * (cell > 1), style=HEAT[level])
        worst = max((v for li in group if (v := imbalance(counts[li])) is not None), default=None)
        idle = max(idle_share(counts[li]) for li in group)
        line.append(f"  {fmt.num(worst, 2) if worst is not None else '–':>5}× max/mean {idle:>4.0%} idle", style="dim")
        lines.append(line)
    return lines


def hottest(counts: list[list[int]], n: int = 4) -> str:
    shares = [(c / total, li, e) for li, layer in enumerate(counts) if (total := sum(layer)) for e, c in enumerate(layer)]
    top = sorted(shares, reverse=True)[:n]
    return "hottest: " + " · ".join(f"L{li}·E{e} {share:.0%}" for share, li, e in top) if top else ""


def render(session, width: int, height: int, window: str, ascii_only: bool = False) -> Text:
    r = session.ready
    routing = r.routing if r is not None else None
    book = session.experts
    server = r.server if r is not None and r.server else None
    if not routing and server and server.get("expert_dir"):
        if not book.run:
            return Text(f"Experts: {server['engine']}'s recorder, read from {server['expert_dir']} after each run; no run yet", style="dim")
        # The dump's shape is all a server says of its MoE: no top-k, so routings, not positions.
        routing = {"layers": len(book.run), "experts": len(book.run[0]), "top_k": 0, "shared": 0}
    if not routing:
        if server:
            engine = server.get("engine") or "the server"
            how = (
                "attach with --expert-dir DIR (docs/models.md)"
                if engine in RECORDERS
                else "an MoE's routing shows for models tokentop runs, " + " and ".join(f"{e}'s" for e in RECORDERS)
            )
            why = f"{engine} exposes no expert load that tokentop reads; {how}"
        else:
            why = (r.routing_note if r is not None else "") or "the model is not a mixture of experts"
        return Text(f"no expert pane: {why}", style="dim")
    shared = f", {routing['shared']} layers with a shared expert (every token's, not routed)" if routing["shared"] else ""
    k = f", {routing['top_k']} a token" if routing["top_k"] else ""
    whose = f" ({server['engine']}'s recorder: every client's requests over the run's span)" if server else ""
    out = Text(f"Experts{whose}: {routing['layers']} MoE layers × {routing['experts']} routed experts{k}{shared}\n", style="bold")
    if not book.run:
        out.append("no run yet: the counts come with the first run's steps", style="dim")
        return out
    counts, steps = (book.run, book.run_steps) if window == "run" else book.window(WINDOW_STEPS)
    if routing["top_k"]:
        routed = f"{sum(counts[0]) // routing['top_k']} positions routed over {steps} steps"
    else:
        routed = f"{sum(counts[0])} routings (positions × top-k) a layer over {steps} forward passes"
    scope = f"run {book.run_id} so far" if window == "run" else f"run {book.run_id}, its last {steps} steps"
    out.append(f"{scope}: {routed}; a cell: an expert's load against its layer's busiest\n", style="dim")
    for line in heatmap(counts, width, max(1, height - 6), ascii_only):
        out.append_text(line)
        out.append("\n")
    out.append(hottest(counts) + "\n")
    bw = session.bandwidth
    if bw is not None and bw.expert_bytes and book.last_hits is not None:
        read = step_weight_bytes(bw.weight_bytes, bw.expert_bytes, routing, book.last_hits)
        total = routing["layers"] * routing["experts"]
        out.append(
            f"the last step read {book.last_hits} of {total} experts: {fmt.nbytes(read)} of weights "
            f"(one token's {routing['layers']}×{routing['top_k']}: {fmt.nbytes(bw.weight_bytes)})"
        )
    return out


class ExpertsScreen(Screen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,E,q", "dismiss", "close"), Binding("w", "window", "window")]
    DEFAULT_CSS = """
    ExpertsScreen { background: $surface; }
    ExpertsScreen > #experts-body { height: 1fr; padding: 0 1; }
    ExpertsScreen > #experts-keys { height: 1; background: $panel; color: $text-muted; }
    """

    def __init__(self, session, ascii_only: bool = False):
        super().__init__()
        self.session = session
        self.ascii_only = ascii_only
        self.window = "run"
        self.body = Static("", id="experts-body")

    def compose(self) -> ComposeResult:
        yield self.body
        yield Static(KEYS, id="experts-keys")

    def on_mount(self) -> None:
        self.show()

    def on_resize(self) -> None:
        self.show()

    def action_window(self) -> None:
        self.window = "last" if self.window == "run" else "run"
        self.show()

    def show(self) -> None:
        self.body.update(render(self.session, max(40, self.size.width - 2), max(8, self.size.height - 1), self.window, self.ascii_only))
