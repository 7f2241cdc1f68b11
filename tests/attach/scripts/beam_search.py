"""A user's script, not tokentop's: beam search (which streams nothing) on a local model folder,
timing each step itself with a logits processor of its own (transformers calls it once a step,
after the forward), and printing its text, its step count and its median step time."""

import itertools
import statistics
import sys
import time

from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList


class Clock(LogitsProcessor):
    def __init__(self):
        self.times = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter_ns())
        return scores


folder, beams, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
clock = Clock()
inputs = tok("The capital of France is", return_tensors="pt")
out = model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, num_beams=beams, do_sample=False, logits_processor=LogitsProcessorList([clock]))
print(f"TEXT {tok.decode(out[0, inputs.input_ids.shape[-1] :], skip_special_tokens=True)!r}", flush=True)
print(f"STEPS {len(clock.times)}", flush=True)
print(f"ITL_MS {statistics.median((b - a) / 1e6 for a, b in itertools.pairwise(clock.times)):.3f}", flush=True)
