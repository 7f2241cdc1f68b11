"""Framework overhead per token, on a tiny Llama where compute is nil and overhead is everything.

hidden 16, 1 layer, 1 head, vocab 256, 64 new tokens from a 1-token prompt, greedy (the setup of
transformers issue #43089). In one process, side by side: `model.generate`, a bare loop of forward
calls over a DynamicCache, tokentop's engine (eager), and the engine with the compile lever.
It also counts the host's reads of tensor values per token (monitors/host_reads.py: on a GPU each
is a device→host sync), on any device; on CUDA, beside them, the syncs CUDA itself reports.

    .venv/bin/python benchmarks/engine/framework_overhead.py [--device cuda] [--repeats 20] [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

from tui_app.engine.models import cache_kwarg

NEW = 64


def tiny_llama(folder: str, tokenizer: str | None = None):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from tui_app.engine.models import _gguf_cache_dir, find_default_gguf, load_model

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=16,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(cfg).save_pretrained(folder)
    # The engine wants a tokenizer to detokenize; ids < 256 decode with the default model's
    # (given as a folder, or by TOKENTOP_TOKENIZER, where the model itself is absent: the GPU machine, docs/gpu.md).
    tokenizer = tokenizer or os.environ.get("TOKENTOP_TOKENIZER")
    if tokenizer is None:
        cached = _gguf_cache_dir(find_default_gguf())
        if not (cached / "tokenizer.json").exists():
            load_model("default", "cpu", torch.float32)
        tokenizer = str(cached)
    AutoTokenizer.from_pretrained(tokenizer).save_pretrained(folder)


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_it(fn, device, repeats):
    for _ in range(3):
        fn()
    sync(device)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync(device)
        out.append((time.perf_counter() - t) * 1000 / NEW)
    return statistics.median(out)


def reads_per_token(fn, device) -> tuple[float, float | None]:
    """Host reads of tensor values per token on any device; on CUDA also the syncs CUDA reports."""
    from monitors.host_reads import count_host_reads

    with count_host_reads(cuda=device.startswith("cuda")) as n:
        fn()
    return n.per_token(NEW)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--tokenizer", default=None, help="the default model's tokenizer folder (default: its converted copy)")
    args = ap.parse_args()
    from transformers import DynamicCache

    from tui_app.commands.bench import apply_levers
    from tui_app.engine.generation import Engine, EngineConfig
    from tui_app.requests import RunRequest

    folder = tempfile.mkdtemp(prefix="tiny-llama-")
    tiny_llama(folder, args.tokenizer)
    phases = []
    engine = Engine(
        EngineConfig(model=folder, device=args.device, dtype="fp32"),
        lambda ev: phases.append(ev) if type(ev).__name__ == "Phase" and ev.name == "compile" and ev.done else None,
    )
    engine.load()
    model, dev = engine.model, engine.device
    ids = torch.tensor([[1]], device=dev)
    mask = torch.ones_like(ids)

    def generate():
        with torch.inference_mode():
            model.generate(ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0)

    def bare():
        with torch.inference_mode():
            cache = DynamicCache(config=model.config)
            x = ids
            for _ in range(NEW):
                x = model(input_ids=x, **{cache_kwarg(type(model)): cache}, use_cache=True).logits[:, -1:].argmax(-1)

    req = RunRequest(prompt_ids=[1], max_new_tokens=NEW, ignore_eos=True)

    def eng():
        engine.run(req)

    rows = {}
    rows["generate"] = time_it(generate, dev, args.repeats)
    rows["bare forward loop"] = time_it(bare, dev, args.repeats)
    rows["engine (eager)"] = time_it(eng, dev, args.repeats)
    refused = apply_levers(engine, {"compile": True})
    if not refused:
        eng()  # the compile phase itself happens before the first compiled run
        rows["engine (compile)"] = time_it(eng, dev, args.repeats)
    print(
        f"tiny Llama (hidden 16, 1 layer, vocab 256), {NEW} new tokens, device {dev}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, median of {args.repeats}\n"
    )
    print("| loop | ms/token | ÷ generate | target |")
    print("|---|---|---|---|")
    targets = {"engine (eager)": "≤ 0.6", "engine (compile)": "≤ 0.25"}
    for name, v in rows.items():
        print(f"| {name} | {v:.3f} | {v / rows['generate']:.2f} | {targets.get(name, '')} |")
    if refused:
        print(f"\ncompile lever refused: {refused}")
    else:
        print(f"\ncompile phase (its own phase, not in the numbers above): {sum(p.seconds for p in phases):.1f} s")
    apply_levers(engine, {})
    counts = {"generate": reads_per_token(generate, dev), "engine (eager)": reads_per_token(eng, dev)}
    if not refused:
        apply_levers(engine, {"compile": True})
        counts["engine (compile)"] = reads_per_token(eng, dev)
    print("\n| loop | host reads of tensor values per token (each a sync on a GPU) | CUDA's own sync count | target |\n|---|---|---|---|")
    for name, (reads, syncs) in counts.items():
        cuda = "not on CUDA" if syncs is None else f"{syncs:.2f}"
        print(f"| {name} | {reads:.2f} | {cuda} | {'' if name == 'generate' else '≤ 1'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
