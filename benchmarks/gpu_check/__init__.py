"""`make gpu-check`: every CUDA path of tokentop on one GPU, one line per check and a Markdown report.

Each check prints one line, `STATUS | name | figure | reference | reason`, and the report (a
Markdown table of the same lines, plus the logs of what ran beside) is rewritten after each, so
a run cut short still leaves one. A check catches its own failure: one FAIL never stops the rest.
Without CUDA it says so in one line and exits 2.

The lent GPU machine has no network and no copy of the default model (its GGUF is 98 MB, more
than the 64 MiB that travels there), so models are made there from a config with random weights
and the default model's tokenizer: the default model's own architecture for the levers and the
instruments, and a Llama of about 1B parameters for the bandwidth figure. Random weights serve
speed, memory, every instrument and the equality of greedy outputs between levers; what needs the
real weights (perplexity under int8/int4) runs only where the default model is installed, and
says SKIP with that reason elsewhere.

Here, on a machine with network: `make gpu-wheels` (the wheels that machine lacks and the
tokenizer, into .gpu-wheels/). There: `make gpu-check` (docs/gpu.md).

    python3 -m benchmarks.gpu_check [--out DIR] [--budget-s 420] [--only TEXT] [--start-at TEXT]
    .venv/bin/python -m benchmarks.gpu_check --wheels .gpu-wheels

The parts: report.py (a check's line, the report, the comparisons it judges by), models.py (the
models made here and the bench that runs them), checks.py (the checks that need CUDA), run.py (the
order they run in, and the command line), wheels.py (what travels to the GPU machine).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".gpu-wheels"
TOKENIZER = "default-tokenizer"  # inside the wheels folder: the default model's tokenizer and config
MiB = 2**20
NEW_TOKENS = 24
SWITCH_AT = 6  # the step at whose start the levers change: a user's switch mid-run
# One lever per group; a pair takes two different groups (two quant levels are no pair).
LEVER_GROUPS = {
    "cache": {"no-cache": {"cache": False}},
    "compile": {"compile": {"compile": True}},
    "quant": {"int8": {"quant": "int8"}, "int4": {"quant": "int4"}},
    "spec": {"lookup": {"spec": "lookup"}, "draft": {"spec": "draft"}},
    "batch": {"b2": {"batch": 2}, "b4": {"batch": 4}, "b8": {"batch": 8}},
}
# ~1B parameters (Llama 3.2 1B's shape with the default model's vocabulary): enough to load the GPU's memory bus.
BIG = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64}
