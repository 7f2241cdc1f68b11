"""The app's keys, and its entries in the command palette (ctrl+p): every key's action as a sentence,
with its key as the help line, so the palette teaches the keys."""

from __future__ import annotations

from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider

# Every key of the app: its action, its word on the key bar (none: only on `?` and the palette).
KEYS: list[BindingType] = [
    Binding("k", "lever('cache')", "cache"),
    Binding("c", "lever('compile')", "compile"),
    Binding("w", "lever('quant')", "quant"),
    Binding("s", "lever('spec')", "spec"),
    Binding("b", "lever('batch')", "batch"),
    Binding("T", "lever('think')", "think budget", show=False),
    Binding("l", "preset", "length"),
    Binding("t", "next_server", "next server", show=False),
    Binding("n", "new_prompt", "prompt"),
    Binding("r", "rerun", "rerun"),
    Binding("space", "pause", "pause"),
    Binding("a", "auto", "auto"),
    Binding("v", "next_view", "view", show=False),
    Binding("m", "probe", "measure mem bw", show=False),
    Binding("L", "leak_view", "leak view", show=False),
    Binding("H", "history", "CUDA history", show=False),
    Binding("p", "anatomy", "anatomy", show=False),
    Binding("o", "colouring", "colour", show=False),
    Binding("f", "fold", "fold thinking", show=False),
    Binding("g", "ledger", "ledger", show=False),
    Binding("E", "experts", "experts", show=False),
    Binding("P", "screen.present", "present", show=False),
    Binding("e", "save('export')", "export"),
    Binding("x", "xray", "x-ray"),
    Binding("ctrl+s", "save('screenshot')", "screenshot", show=False),
    Binding("R", "restart", "restart", show=False),
    Binding("question_mark", "help", "help"),
    Binding("q", "quit", "quit"),
    Binding("ctrl+q", "quit", "quit", show=False, priority=True),
    Binding("ctrl+c", "quit", "quit", show=False, priority=True),
]

ENTRIES = {
    "lever('cache')": "Switch the KV cache on or off",
    "lever('compile')": "Switch the compiled decode step on or off",
    "lever('quant')": "Cycle the weight quantization: off, int8, int4",
    "lever('spec')": "Cycle speculative decoding: off, prompt lookup, draft model",
    "lever('batch')": "Cycle the batch size: 1, 2, 4, 8 (distinct prompts arriving during the run)",
    "lever('think')": "Cycle a reasoning model's thinking budget: off, 64, 256, 1024 tokens, none (at the budget the think span is closed)",
    "preset": "Switch the prompt length preset",
    "next_server": "Send the next run to the next attached server",
    "new_prompt": "Type a new prompt",
    "rerun": "Run the prompt again",
    "pause": "Pause or resume generation",
    "auto": "Switch auto-repeat on or off",
    "next_view": "Show the next chart (small terminals)",
    "probe": "Measure the memory read rate again",
    "leak_view": "Switch the memory pane between memory over time and the leak view (the baselines, their fit)",
    "anatomy": "Profile the next 8 decode steps: where a step's time goes, by part of the model, beside the other levers' (slows those steps)",
    "colouring": "Cycle the tokens' colouring: plain, by origin (speculation's kept and rejected drafts), by latency, by the model's confidence, by phase",
    "fold": "Fold a reasoning model's thinking to a line a think span (it counts on while the model thinks), or show it whole",
    "screen.present": "The presenter's screen on or off: tok/s, TTFT and ITL in big figures, thick charts, for a projector",
    "ledger": "The lever ledger: whether each lever mix run so far paid on this machine against plain, and when",
    "experts": "An MoE's experts: which each layer routes to, how evenly, and what the last step read",
    "history": "Record the CUDA allocator's history for the next 3 runs, saved for PyTorch's memory viewer (slows the engine)",
    "xray": "X-ray: the last run's requests as a waterfall, server phases under the client's chunks",
    "save('export')": "Export the session as JSON",
    "save('screenshot')": "Save a screenshot (SVG)",
    "restart": "Restart the engine",
    "help": "Show the keys and what each pane shows",
}


class KeyCommands(Provider):
    """The app's keys (its BINDINGS) that have an entry above."""

    def commands(self) -> list[tuple[str, str, object]]:
        app = self.app
        return [(ENTRIES[b.action], f"key: {app.get_key_display(b)}", lambda a=b.action: app.run_action(a)) for b in app.BINDINGS if b.action in ENTRIES]

    async def discover(self) -> Hits:
        for title, help_text, run in self.commands():
            yield DiscoveryHit(title, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, run in self.commands():
            if (score := matcher.match(title)) > 0:
                yield Hit(score, matcher.highlight(title), run, help=help_text)
