"""What telling thinking from answer costs a plain run, attached and in-process.

Attached: a server's stream of plain answer chunks (llama.cpp's shape, a running count on each,
the reference text's words) read by the client's chunk reader as it reads them, and read again
with the phase splitter taken out (each chunk straight to the answer), in alternation, round by
round in one run. The splitter reads every content chunk for markers, so this is its whole cost;
the figure beside it is the interval between two chunks of a fast server (2,000 a second).
In-process: a step's phase, on the default model (no think markers: nothing to read) and on a
model whose tokenizer has them (the step's text read for markers), against the default model's
own median decode step, measured in the same run.

    .venv/bin/python benchmarks/serving/phase_cost.py [--chunks 4000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from monitors.phases import ANSWER, SPANS, Piece, StepPhases
from tui_app.attach.sse import ChunkReader
from tui_app.prompts import reference_text

FAST_SERVER_GAP_US = 500.0  # 2,000 chunks a second


def stream(n: int) -> list[str]:
    words = reference_text().split()
    return [
        json.dumps({"choices": [{"index": 0, "delta": {"content": f" {words[i % len(words)]}"}}], "timings": {"prompt_n": 9, "predicted_n": i + 1}})
        for i in range(n)
    ]


def read_us(lines: list[str], split: bool) -> float:
    """µs a chunk, the whole stream read; `split` False: each chunk's parts straight to the answer."""
    reader = ChunkReader()
    if not split:
        reader.phases.push = lambda parts, n, t: [Piece("".join(x for _, x in parts), n, ANSWER, t)]  # type: ignore[method-assign]
    t0 = time.perf_counter_ns()
    for i, line in enumerate(lines):
        reader.read(line, i)
    reader.close()
    return (time.perf_counter_ns() - t0) / 1e3 / len(lines)


def step_phase_us(tok, spans: tuple, texts: list[str]) -> float:
    phases = StepPhases(tok, spans, [1, 2, 3])
    t0 = time.perf_counter_ns()
    for text in texts:
        phases.of(text, 1)
    return (time.perf_counter_ns() - t0) / 1e3 / len(texts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    lines = stream(args.chunks)
    pairs = []
    for _ in range(args.rounds):  # A, B, A, B: the machine's drift moves both alike
        pairs.append((read_us(lines, True), read_us(lines, False)))
    cost = [a - b for a, b in pairs]
    with_split, without = statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs)
    print(f"attached, a chunk read: {with_split:.1f} µs with the phase splitter, {without:.1f} µs without")
    print(
        f"  the splitter: {statistics.median(cost):.1f} µs a chunk (rounds {min(cost):.1f}–{max(cost):.1f}), "
        f"{statistics.median(cost) / FAST_SERVER_GAP_US:.2%} of a fast server's {FAST_SERVER_GAP_US:.0f} µs between chunks"
    )

    from tui_app.engine.generation import Engine, EngineConfig
    from tui_app.requests import RunRequest

    steps: list = []
    engine = Engine(EngineConfig(model="default"), steps.append)
    engine.load()
    engine.run(RunRequest(prompt="Tell me about the sea.", max_new_tokens=48, ignore_eos=True))
    decode = [s for s in steps if getattr(s, "kind", "") == "decode"]
    step_us = statistics.median(s.dt_ns for s in decode) / 1e3
    texts = [s.text for s in decode] * 200
    plain = statistics.median(step_phase_us(engine.tok, (), texts) for _ in range(args.rounds))
    marked = statistics.median(step_phase_us(engine.tok, SPANS, texts) for _ in range(args.rounds))
    print(f"in-process, the default model's median decode step: {step_us:.0f} µs")
    print(f"  a step's phase: {plain:.2f} µs with no markers ({plain / step_us:.4%} of a step)")
    print(f"  {marked:.2f} µs reading a thinking model's markers ({marked / step_us:.3%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
