"""The in-process engine: its cost per token against `generate` (framework_overhead.py), each
lever's effect (levers.py), their verdicts in the ledger (ledger.py) and their anatomy
(anatomy_levers.py), the batch lever's trade (batching.py), decode against the memory's read rate
and llama.cpp (ceiling.py), the quantized kernels and their weights' layout (kernel_stream.py,
packed_layout.py), what the engine's own instruments cost a step (anatomy_cost.py,
leak_sites_cost.py), and launch to the first token (startup.py)."""
