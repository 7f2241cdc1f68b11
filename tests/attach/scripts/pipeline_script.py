"""A user's script, not tokentop's: a transformers text-generation pipeline on a local model folder,
timing each token itself with a streamer of its own, and printing its text and its times."""

import itertools
import sys
import time

from transformers import pipeline
from transformers.generation.streamers import BaseStreamer


class Clock(BaseStreamer):
    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter_ns())

    def end(self):
        pass


folder, calls = sys.argv[1], int(sys.argv[2])
generate = pipeline("text-generation", model=folder, device="cpu")
for _ in range(calls):
    clock = Clock()
    out = generate("The capital of France is", max_new_tokens=24, do_sample=False, streamer=clock, return_full_text=False)
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(clock.times[1:])]  # token to token, the prompt left out
    print(f"TEXT {out[0]['generated_text']!r}", flush=True)
    print(f"ITL_MS {sorted(gaps)[len(gaps) // 2]:.3f}", flush=True)
sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
