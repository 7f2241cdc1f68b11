"""What the token pane's colouring (`o`) costs. The engine: a verify step's text pushed to the
incremental decoder in two parts (the accepted drafts, then the target's own token) instead of one,
and its rejected drafts' text peeked between (as many tokens as were rejected), replayed over a
real prompt-lookup run's steps on the default tokenizer, as a share of that run's median step.
The UI: the heat of each step (RunLatency), the split of its text, its sureness and the run's
draft counts, per step. The confidence colouring: the engine's host read with each new token's probability (a softmax over
the vocabulary) against without, timed alone, and a run's median decode step with it on and off,
taken in turns, for each lever mix in --mixes.

    .venv/bin/python benchmarks/terminal/colour_cost.py [--tokens 128] [--repeats 5] [--mixes plain,int4,int4+compile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from monitors.events import Step
from monitors.text import IncrementalDecoder, step_text
from tui_app.commands.bench import apply_levers
from tui_app.engine.config import EngineConfig
from tui_app.engine.generation import Engine
from tui_app.requests import Confidence, RunRequest
from tui_app.ui.screens.monitor import RunLatency
from tui_app.ui.widgets.token_stream import sureness


def replay_ns(tok, steps: list[Step], split: bool, repeats: int, each: bool = False) -> float:
    """Best of `repeats` of the whole run's pushes (through the engine's step_text), ns a step.
    split: a verify step's drafts apart and its rejected ones peeked (their ids are not in the
    event: as many of its last token); each: a token at a time, as under the confidence colouring."""
    best = float("inf")
    for _ in range(repeats):
        text = IncrementalDecoder(tok)
        t = time.perf_counter_ns()
        for s in steps:
            if split:
                step_text(text, s.token_ids, s.accepted, s.token_ids[-1:] * (s.proposed - s.accepted), each)
            else:
                text.push(s.token_ids)
        best = min(best, time.perf_counter_ns() - t)
    return best / len(steps)


def ui_ns(steps: list[Step], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        latency, parts, drafts = RunLatency(), [], (0, 0, "")
        t = time.perf_counter_ns()
        for s in steps:
            level = latency.heat(s)
            drafts = (drafts[0] + s.accepted, drafts[1] + s.proposed - s.accepted, s.rejected_text)
            if s.drafted_chars:
                parts.append((s.text[: s.drafted_chars], "drafted", level, -1))
            parts.append((s.text[s.drafted_chars :], "", level, -1))
            parts.extend(("", "", level, sureness(p)) for p in s.confidence)  # measured: a part per token
        best = min(best, time.perf_counter_ns() - t)
    return best / len(steps)


def read_ns(decoder, vocab: int, on: bool, n: int = 2000) -> float:
    """Best of 5 rounds of `n` host reads of one decode step's token, ns a read."""
    logits, new = torch.randn(1, 1, vocab), torch.zeros(1, 1, dtype=torch.long)
    decoder.confidence, best = on, float("inf")
    for _ in range(5):
        t = time.perf_counter_ns()
        for _ in range(n):
            decoder.read(new, logits)
        best = min(best, time.perf_counter_ns() - t)
    decoder.confidence = False
    return best / n


def decode_ms(engine, events: list, req: RunRequest, on: bool) -> float:
    engine.command(Confidence(on=on))
    events.clear()
    engine.run(req)
    engine.command(Confidence(on=False))
    return statistics.median(e.dt_ns for e in events if isinstance(e, Step) and e.kind == "decode") / 1e6


def confidence_cost(engine, events: list, mixes: list[str], tokens: int, repeats: int) -> None:
    vocab = engine.model.get_output_embeddings().weight.shape[0]
    off, on = read_ns(engine.decoder, vocab, False), read_ns(engine.decoder, vocab, True)
    print(f"confidence: the host read {off / 1e3:.1f} µs without, {on / 1e3:.1f} µs with (vocabulary {vocab}): +{(on - off) / 1e3:.1f} µs a step")
    req = RunRequest(preset="short", max_new_tokens=tokens, ignore_eos=True)
    for mix in mixes:
        apply_levers(engine, {"plain": {}, "int4": {"quant": "int4"}, "int4+compile": {"quant": "int4", "compile": True}}[mix])
        decode_ms(engine, events, req, False)  # warm (compile's graphs, the quantized weights)
        pairs = [(decode_ms(engine, events, req, False), decode_ms(engine, events, req, True)) for _ in range(repeats)]
        step = statistics.median(a for a, _ in pairs)
        ratios = ", ".join(f"{b / a:.3f}" for a, b in pairs)
        print(f"  {mix}: median decode step {step:.2f} ms; the read's cost {(on - off) / 1e6 / step:.2%} of it; step with / without, in turns: {ratios}")
    apply_levers(engine, {})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--mixes", default="plain,int4,int4+compile")
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
    each = replay_ns(engine.tok, steps, True, args.repeats, each=True)
    ui = ui_ns(steps, args.repeats)
    print(f"default model, prompt lookup, story prompt, {len(steps)} steps ({len(verify)} verify, {sum(s.accepted for s in verify)} drafts accepted)")
    print(f"median step {step_ns / 1e6:.2f} ms")
    print(f"engine: text pushed whole {one / 1e3:.1f} µs a step, split {two / 1e3:.1f} µs: +{(two - one) / 1e3:.1f} µs = {(two - one) / step_ns:.3%} of a step")
    print(f"confidence on, each token's text apart: {each / 1e3:.1f} µs a step, +{(each - two) / 1e3:.1f} µs over split")
    print(f"UI: heat, split, sureness and draft counts {ui / 1e3:.2f} µs a step = {ui / step_ns:.4%} of a step's interval")
    confidence_cost(engine, events, args.mixes.split(","), args.tokens, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
