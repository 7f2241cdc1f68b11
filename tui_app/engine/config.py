"""The engine's configuration, as the UI sends it to the engine's process. A plain dataclass with no
torch import, so the UI process never loads torch (about 200 MB of RSS and a second of startup)."""

from __future__ import annotations

from dataclasses import dataclass, field

from monitors.events import Levers

# accelerate's strategies for --device-map: fill the GPUs in order (auto, sequential) or evenly.
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
# What the batch lever batches: distinct prompts arriving during the run (engine/batching.py), or the run's own prompt copied.
BATCH_PROMPTS = ("distinct", "replicated")


@dataclass
class EngineConfig:
    model: str = "default"
    device: str = "auto"
    dtype: str = "auto"
    draft_model: str | None = None
    draft_layers: int = 4
    threads: int = 0  # 0: all cores but one on CPU, leaving one for the UI
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    levers: Levers = field(default_factory=Levers)
    batch_prompts: str = "distinct"  # BATCH_PROMPTS
    first_run_id: int = 1  # a restarted engine continues the session's numbering
    demo_leak_mb: float = 0.0  # --demo-leak: keep this much memory per run on purpose, for the leak view's demo
    demo_leak_kind: str = "tensor"  # on the engine's device, or "python": Python objects
    device_map: str | None = None  # accelerate's placement over the GPUs, CPU and disk (DEVICE_MAPS)
    max_memory: dict | None = None  # its per-device limits, accelerate's form: {0: "20GiB", "cpu": "64GiB"}
