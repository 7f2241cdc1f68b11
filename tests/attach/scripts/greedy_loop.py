"""A user's script, not tokentop's: a hand-written greedy decode loop over model(...) with a KV
cache, no generate(). It times each token itself (when the token is in hand) and prints its text
and its median time from token to token."""

import itertools
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

folder, runs = sys.argv[1], int(sys.argv[2])
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
with torch.inference_mode():
    for _ in range(runs):
        ids = tok("The capital of France is", return_tensors="pt").input_ids
        cache, made, stamps = None, [], []
        for _ in range(24):
            out = model(input_ids=ids, cache=cache, use_cache=True)
            cache = out.cache
            ids = out.logits[:, -1:].argmax(-1)
            made.append(int(ids[0, 0]))
            stamps.append(time.perf_counter_ns())
        gaps = sorted((b - a) / 1e6 for a, b in itertools.pairwise(stamps))
        print(f"TEXT {tok.decode(made[:-1], skip_special_tokens=True)!r}", flush=True)
        print(f"ITL_MS {gaps[len(gaps) // 2]:.3f}", flush=True)
