"""What the token pane's colouring (`o`) costs. The engine: a verify step's text pushed to the
incremental decoder in two parts (the accepted drafts, then the target's own token) instead of one,
replayed over a real prompt-lookup run's steps on the default tokenizer, as a share of that run's
median step. The UI: the heat of each step (RunLatency) and the split of its text, per step.

    .venv/bin/python benchmarks/colour_cost.py [--tokens 128] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from monitors.events import Step
from monitors.text import IncrementalDecoder
from tui_app.commands.bench import apply_levers
from tui_app.engine.config import EngineConfig
from tui_app.engine.generation import Engine
from tui_app.requests import RunRequest
from tui_app.ui.screens.monitor import RunLatency


def replay_ns(tok, steps: list[Step], split: bool, repeats: int) -> float:
    """Best of `repeats` of the whole run's pushes, ns a step."""
    best = float("inf")
    for _ in range(repeats):
        text = IncrementalDecoder(tok)
        t = time.perf_counter_ns()
        for s in steps:
            if split and s.accepted:
                text.push(s.token_ids[: s.accepted])
                text.push(s.token_ids[s.accepted :])
            else:
                text.push(s.token_ids)
        best = min(best, time.perf_counter_ns() - t)
    return best / len(steps)


def ui_ns(steps: list[Step], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        latency, parts = RunLatency(), []
        t = time.perf_counter_ns()
        for s in steps:
            level = latency.heat(s)
            if s.drafted_chars:
                parts.append((s.text[: s.drafted_chars], "drafted", level))
            parts.append((s.text[s.drafted_chars :], "", level))
        best = min(best, time.perf_counter_ns() - t)
    return best / len(steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    events: list = []
    engine = Engine(EngineConfig(), events.append)
    engine.load()
    apply_levers(engine, {"spec": "lookup"})
    req = RunRequest(preset="story", max_new_tokens=args.tokens, ignore_eos=True)
    engine.run(req)  # warm
    events.clear()
    engine.run(req)
    steps = [e for e in events if isinstance(e, Step)]
    verify = [s for s in steps if s.kind == "verify"]
    step_ns = statistics.median(s.dt_ns for s in steps[1:])
    one, two = replay_ns(engine.tok, steps, False, args.repeats), replay_ns(engine.tok, steps, True, args.repeats)
    ui = ui_ns(steps, args.repeats)
    print(f"default model, prompt lookup, story prompt, {len(steps)} steps ({len(verify)} verify, {sum(s.accepted for s in verify)} drafts accepted)")
    print(f"median step {step_ns / 1e6:.2f} ms")
    print(f"engine: text pushed whole {one / 1e3:.1f} µs a step, split {two / 1e3:.1f} µs: +{(two - one) / 1e3:.1f} µs = {(two - one) / step_ns:.3%} of a step")
    print(f"UI: heat and split {ui / 1e3:.2f} µs a step = {ui / step_ns:.4%} of a step's interval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
