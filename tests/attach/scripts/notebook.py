"""A notebook's cells as a script: a model and its tokenizer loaded, `tokentop.watch(model, tok)`,
then generate() calls one after another, each call's wall time and this process's CPU time in it
printed as it ends: what the call waited, off the CPU, is their difference."""

import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import tokentop

folder, calls = sys.argv[1], int(sys.argv[2])
# A core left for the listener whose death and restart the test times, as tokentop's own engine
# leaves one for the UI: torch's ops on every core wait for their slowest thread, so a listener
# starting on a 2-core machine made one call 2.0x the median (2026-11-28, CI), the machine's
# doing and not the hook's.
torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
tokentop.watch(model, tok)
print("WATCHING", flush=True)
for i in range(calls):
    t0, c0 = time.perf_counter(), time.process_time()
    model.generate(**tok("The capital of France is", return_tensors="pt"), max_new_tokens=24, do_sample=False)
    print(f"CALL {i + 1} {time.perf_counter() - t0:.3f} {time.process_time() - c0:.3f}", flush=True)
