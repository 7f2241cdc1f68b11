"""A notebook's cells as a script: a model and its tokenizer loaded, `tokentop.watch(model, tok)`,
then generate() calls one after another, each call's own wall time printed as it ends."""

import sys
import time

from transformers import AutoModelForCausalLM, AutoTokenizer

import tokentop

folder, calls = sys.argv[1], int(sys.argv[2])
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
tokentop.watch(model, tok)
print("WATCHING", flush=True)
for i in range(calls):
    t0 = time.perf_counter()
    model.generate(**tok("The capital of France is", return_tensors="pt"), max_new_tokens=24, do_sample=False)
    print(f"CALL {i + 1} {time.perf_counter() - t0:.3f}", flush=True)
