"""The token pane's colourings (`o`), fed through the monitor screen as the engine sends its steps."""

from rich.text import Text
from textual.app import App


async def test_the_tokens_are_coloured_by_origin_latency_and_confidence_as_o_cycles():
    """Steps through the screen as the engine sends them: a verify step's accepted drafts (its
    drafted_chars) underlined in the origin colouring, each step's time a token against the run's
    median in the latency colouring, each token's own probability in the confidence colouring; `o`
    re-styles what is kept, and the legend says what is what."""
    from monitors.events import Levers, RunStarted, Step
    from tui_app.core.session import Session
    from tui_app.ui.screens.monitor import MonitorScreen

    def step(n, text, ms, tokens=1, accepted=0, drafted_chars=0, kind="decode", confidence=(), proposed=None, rejected_text="", chars=()):
        return Step(
            run_id=1,
            step=n,
            kind=kind,
            token_ids=[0] * tokens,
            text=text,
            n_tokens=tokens,
            t_ns=0,
            dt_ns=int(ms * 1e6),
            forward_ns=0,
            kv_bytes=0,
            kv_alloc_bytes=0,
            seq_len=0,
            proposed=accepted if proposed is None else proposed,
            rejected_text=rejected_text,
            accepted=accepted,
            drafted_chars=drafted_chars,
            confidence=list(confidence),
            token_chars=list(chars),
        )

    screen = MonitorScreen(Session(), "engine")

    class Screened(App):
        def on_mount(self):
            self.push_screen(screen)

    async with Screened().run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen.show(RunStarted(run_id=1, levers=Levers(spec="lookup"), prompt_tokens=3, max_new_tokens=30, prompt_text="Say it.", preset="short"))
        screen.show(step(1, "Once", 80, kind="prefill"))  # before any median: no heat
        for n in range(2, 12):
            screen.show(step(n, " upon", 10, confidence=[0.95], chars=[5]))
        # 10 ms a token, three tokens of their own probabilities
        screen.show(step(12, " a time there", 30, tokens=3, accepted=2, drafted_chars=7, kind="verify", confidence=[0.99, 0.6, 0.3], chars=[2, 5, 6]))
        screen.show(step(13, " was", 50, confidence=[0.1], chars=[4]))  # 5× the median
        screen.redraw(running=True, force=True)
        pane = screen.tokens

        def styled(want: str) -> str:
            return "".join(seg.text for strip in pane._strips for seg in strip if seg.style and want in str(seg.style))

        assert not styled("underline") and pane.colouring == "plain" and not pane.border_subtitle
        assert pane.next_colouring() == "origin"
        pane.redraw(force=True)
        assert styled("underline") == " a time", "the two accepted drafts, not the target's own ' there'"
        assert "accepted draft" in str(pane.border_subtitle)
        assert pane.next_colouring() == "latency"
        pane.redraw(force=True)
        assert styled("reverse red") == " was" and not styled("underline")
        assert styled("green").startswith(" upon") and " a time there" in styled("green")
        assert "Once" not in styled("red") + styled("green") + styled("yellow"), "the first token had no median to be weighed by"
        assert "≤1.25×" in str(pane.border_subtitle)
        assert pane.next_colouring() == "confidence"
        pane.redraw(force=True)
        assert styled("reverse red") == " was" and styled("yellow") == " time" and styled("bold red") == " there", "each token its own"
        assert styled("green").endswith(" upon a")
        assert styled("green").startswith(" upon") and "Once" not in styled("red") + styled("green") + styled("yellow"), "unmeasured: plain"
        assert "≥90%" in str(pane.border_subtitle)
        assert pane.next_colouring() == "phase"  # a run of answer alone: nothing styled
        pane.redraw(force=True)
        assert not styled("cyan") and not styled("magenta") and "thinking" in str(pane.border_subtitle)
        assert pane.next_colouring() == "plain"
        pane.redraw(force=True)
        assert not styled("reverse red") and not styled("underline")

        pane.next_colouring()  # origin: the last verify step's rejected drafts ghosted after the text, until the next text
        screen.show(step(14, " in", 10, tokens=2, accepted=1, drafted_chars=3, kind="verify", proposed=3, rejected_text=" a land"))
        screen.redraw(running=True, force=True)
        assert styled("strike") == " a land" and pane.drafts == [3, 2]
        assert "accepted draft 3 · the target's own · rejected 2" in Text.from_markup(str(pane.border_subtitle)).plain
        screen.show(step(15, " the", 10))
        screen.redraw(running=True, force=True)
        assert not styled("strike") and styled("underline") == " a time in"
