"""What counting an MoE's routing costs (tui_app/engine/routing.py), and what a step reads by batch.

A random-weight Qwen3-MoE (hidden 512, 8 layers, 32 experts, 4 a token: tests/helpers/tiny_models.py).
Cost: runs with the counting on (its hooks, the step's counts packed into the read) and off (no
hook, nothing packed), interleaved in pairs whose order alternates, in one process; each run's
median decode step (Step.compute_ns: the forward, the pick, the host read); the median of the
pairs' ratios and their range. Reads: at batch 1, 2, 4 and 8 of distinct prompts, the distinct
experts a decode step read (a mean), the weight bytes that makes (monitors/routing.py) beside one
token's k/n figure, and decode tok/s.

    .venv/bin/python benchmarks/engine/routing_cost.py [--pairs 16] [--tokens 32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from monitors.events import Bandwidth, Step
from monitors.routing import step_weight_bytes
from monitors.routing_hooks import count
from tests.helpers.tiny_models import save_moe
from tui_app.engine.config import EngineConfig
from tui_app.engine.generation import Engine
from tui_app.engine.routing import experts_modules
from tui_app.requests import RunRequest

SIZES = {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64}
MOE = {"num_experts": 32, "num_experts_per_tok": 4, "moe_intermediate_size": 256}


def decode_steps(events: list, run_id: int) -> list[Step]:
    return [e for e in events if isinstance(e, Step) and e.run_id == run_id and e.kind == "decode"]


def counting_us(engine) -> float:
    """What counting adds to one decode step, its pieces timed alone on the model's own modules:
    each layer's hook on a token's top-k, the zeroing, the packing and read, the settling."""
    model, routing = engine.model, engine.routing
    modules = experts_modules(model)
    index = torch.zeros(1, routing.top_k, dtype=torch.long)
    args = (torch.zeros(1, 1), index, torch.zeros(1, routing.top_k))

    def step() -> None:
        routes = routing.begin(model)
        for m in modules:
            count(m, args, {})
        routing.settle(torch.cat(routes).tolist())

    n = 2000
    return min(timeit.repeat(step, number=n, repeat=5)) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="routing-cost-")
    save_moe("qwen3moe", folder, **SIZES, **MOE)
    events: list = []
    engine = Engine(EngineConfig(model=folder), events.append)
    engine.load()
    routing, req = engine.routing, RunRequest(prompt="Tell me about the sea.", max_new_tokens=args.tokens, ignore_eos=True)
    engine.run(req)  # warm
    bw = next(e for e in events if isinstance(e, Bandwidth))  # the load's measurement: the weights stay these
    hooks = {id(m): dict(m._forward_pre_hooks) for m in experts_modules(engine.model)}
    ratios, on_ms = [], []
    for pair in range(args.pairs):
        step_ms = {}
        for counted in (True, False) if pair % 2 == 0 else (False, True):  # each order as often: no first-run bias
            engine.routing = routing if counted else None
            for m in experts_modules(engine.model):  # off: no hook at all, as on a dense model
                m._forward_pre_hooks.clear()
                m._forward_pre_hooks.update(hooks[id(m)] if counted else {})
            done = engine.run(req)
            step_ms[counted] = statistics.median(s.compute_ns for s in decode_steps(events, done.run_id)) / 1e6
        ratios.append(step_ms[True] / step_ms[False])
        on_ms.append(step_ms[True])
        events.clear()
    engine.routing = routing
    pieces_us = counting_us(engine)
    r = engine.ready.routing
    print(f"random-weight Qwen3-MoE: {engine.ready.n_params / 1e6:.1f}M params, {r['experts']} experts, {r['top_k']} a token, {r['layers']} layers")
    print(
        f"counting on ÷ off, decode step: median {statistics.median(ratios):.4f} over {args.pairs} pairs "
        f"(range {min(ratios):.4f}–{max(ratios):.4f}); a step {statistics.median(on_ms):.2f} ms"
    )
    print(
        f"the counting's own work a decode step, timed alone: {pieces_us:.0f} µs "
        f"({pieces_us / 1e3 / statistics.median(on_ms):.2%} of the step): every layer's hook, the zeroing, the counts packed and read, settled"
    )
    print("batch  experts read a step  weight MiB a step (one token's k/n)  decode tok/s")
    for batch in (1, 2, 4, 8):
        engine.set_lever("batch", batch)
        assert engine.levers.batch == batch
        done = engine.run(req)
        steps = decode_steps(events, done.run_id)
        hits = statistics.mean(s.experts_hit for s in steps)
        read = step_weight_bytes(bw.weight_bytes, bw.expert_bytes, engine.ready.routing, round(hits))
        tps = sum(s.n_tokens for s in steps) / (sum(s.dt_ns for s in steps) / 1e9)  # the first sequence's tokens
        rows_tps = sum(s.batch_tokens or s.n_tokens for s in steps) / (sum(s.dt_ns for s in steps) / 1e9)
        print(f"{batch:>5}  {hits:>19.1f}  {read / 2**20:>15.1f} ({bw.weight_bytes / 2**20:.1f})  {rows_tps:>10.1f} ({tps:.1f} the first row's)")
        events.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
