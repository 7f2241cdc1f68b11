"""The command palette's tokentop entries (ctrl+p): every key's action as a sentence, with its key
as the help line, so the palette teaches the keys."""

from __future__ import annotations

from textual.command import DiscoveryHit, Hit, Hits, Provider

ENTRIES = {
    "lever('cache')": "Switch the KV cache on or off",
    "lever('compile')": "Switch the compiled decode step on or off",
    "lever('quant')": "Cycle the weight quantization: off, int8, int4",
    "lever('spec')": "Cycle speculative decoding: off, prompt lookup, draft model",
    "lever('batch')": "Cycle the batch size: 1, 2, 4, 8",
    "preset": "Switch the prompt length preset",
    "next_server": "Send the next run to the next attached server",
    "new_prompt": "Type a new prompt",
    "rerun": "Run the prompt again",
    "pause": "Pause or resume generation",
    "auto": "Switch auto-repeat on or off",
    "next_view": "Show the next chart (small terminals)",
    "probe": "Measure the memory read rate again",
    "export": "Export the session as JSON",
    "screenshot": "Save a screenshot (SVG)",
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
