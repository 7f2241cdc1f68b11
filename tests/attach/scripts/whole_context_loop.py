"""A user's script, not tokentop's: the first decode loop most people write, with no cache, the
whole sequence through model(...) at each step. Each mode named, in turn: `argmax`, `sample`
(torch.multinomial, seeded) or `batch` (two prompts, left-padded) decodes one prompt for N tokens;
`chat` decodes a first turn, then the conversation with the answer and a second user message
appended, from the start.
It prints what it knows of each generation: the prompt's tokens, the text of the tokens it fed
back (the last one it chose is never fed to the model), and its median time from token to token."""

import itertools
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

folder, modes, new = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
gen = torch.Generator().manual_seed(0)


def decode(mode, ids, mask=None):
    print(f"PROMPT {ids.shape[1]}", flush=True)
    start, stamps = ids.shape[1], []
    for _ in range(new):
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -1]
        nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen) if mode == "sample" else logits.argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
        stamps.append(time.perf_counter_ns())
    print(f"TEXT {tok.decode(ids[0, start:-1], skip_special_tokens=True)!r}", flush=True)
    gaps = sorted((b - a) / 1e6 for a, b in itertools.pairwise(stamps))
    print(f"ITL_MS {gaps[len(gaps) // 2]:.3f}", flush=True)
    return tok.decode(ids[0, start:], skip_special_tokens=True)


with torch.inference_mode():
    for mode in modes:
        if mode == "batch":
            tok.pad_token, tok.padding_side = tok.eos_token, "left"
            enc = tok(["Once upon a time", "The capital of France is"], return_tensors="pt", padding=True)
            decode(mode, enc.input_ids, enc.attention_mask)
        elif mode == "chat":
            turns = [{"role": "user", "content": "Name a colour."}]
            answer = decode(mode, tok.apply_chat_template(turns, add_generation_prompt=True, return_tensors="pt", return_dict=True).input_ids)
            turns += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And another?"}]
            decode(mode, tok.apply_chat_template(turns, add_generation_prompt=True, return_tensors="pt", return_dict=True).input_ids)
        else:
            decode(mode, tok("Once upon a time", return_tensors="pt").input_ids)
