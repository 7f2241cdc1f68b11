"""A user's script, not tokentop's: a small MoE's generate() or a hand-written decode loop with
its cache (each run's mode named in turn: `generate`, `loop`), and the script's own count of each
layer's routing, taken from each router's logits (their top k), printed as JSON after each run."""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

folder, modes = sys.argv[1], sys.argv[2].split(",")
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
k, n = model.config.num_experts_per_tok, model.config.num_experts
routers = [m for m in model.modules() if type(m).__name__.lower().endswith("topkrouter")]
counts = torch.zeros(len(routers), n, dtype=torch.long)


def recount(layer):
    def hook(module, args, out):
        counts[layer] += torch.bincount(out[0].reshape(-1, n).float().topk(k, dim=-1).indices.flatten(), minlength=n)

    return hook


for i, router in enumerate(routers):
    router.register_forward_hook(recount(i))
for mode in modes:
    counts.zero_()
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    if mode == "generate":
        model.generate(ids, max_new_tokens=8, do_sample=False)
    else:
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=True)
            for _ in range(7):
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
    print("COUNTS " + json.dumps(counts.tolist()), flush=True)
