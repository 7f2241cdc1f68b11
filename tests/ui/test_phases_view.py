"""A reasoning model's run on screen, replayed from events of known phases: the thinking in
italics, the answer's start marked with its TTFA, the latency chart's mark at the boundary, and
`f` folding each think span to one line that counts its tokens."""

from __future__ import annotations

from dataclasses import replace

from monitors.events import RunStarted, Step
from tests.helpers.synthetic import session_events
from tests.ui.test_app import until
from tui_app.core import fmt
from tui_app.core.sources import ReplaySource
from tui_app.ui.app import TokentopApp

THINK = 12  # the first run's first 12 steps think


def events() -> list:
    out = []
    for ev in session_events(runs=1):
        if isinstance(ev, Step):
            ev = replace(ev, phase="thinking" if ev.step <= THINK else "answer")
        out.append(ev)
    return out


def pane_text(app) -> str:
    return "\n".join(strip.text for strip in app.monitor.tokens.draw(100, 200))


async def test_the_thinking_is_drawn_apart_the_answer_marked_and_f_folds_it():
    evs = events()
    steps = [e for e in evs if isinstance(e, Step)]
    started = next(e for e in evs if isinstance(e, RunStarted))
    thinking = "".join(s.text for s in steps[:THINK])
    tokens = sum(s.n_tokens for s in steps[:THINK])
    app = TokentopApp(ReplaySource(evs, speed=0), None)
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: app.state == "replay finished", timeout=30, what="replay drawn")
        pane = app.monitor.tokens
        italic = [text for text, style, *_ in pane.chunks if text and "italic" in pane._style(style, *_)]
        assert "".join(italic) == thinking  # the thinking, and only it, in its own style
        ttfa = (steps[THINK].t_ns - started.t_ns) / 1e9
        assert f"⟨answer · TTFA {fmt.ms(ttfa)}⟩" in pane_text(app).replace("\n", "")
        assert "answer" in [m.label for m in app.session.markers]  # the latency chart's mark
        shown = pane_text(app)
        await pilot.press("f")
        folded = pane_text(app)
        span = (steps[THINK - 1].t_ns - steps[0].t_ns) / 1e9
        # Between the prompt and the answer's mark, the span's one line alone.
        prompt = started.prompt_text.strip()
        assert f"{prompt}\n⟨thinking… {tokens} tokens, {span:.1f} s⟩\n⟨answer · TTFA" in folded
        assert len(folded) < len(shown)
        await pilot.press("f")
        assert pane_text(app) == shown
