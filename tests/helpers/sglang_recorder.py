"""SGLang's expert-distribution recorder in stat mode, as the SSE stand-in serves it (SGLang does
not run here): `/start_expert_distribution_record` resets and starts it, each forward pass adds its
positions' routing to a circular buffer of int32 [passes, layers, logical experts], and
`/dump_expert_distribution_record` writes `torch.save({"rank", "logical_count",
"average_utilization_rate_over_window"})` to `expert_distribution_recorder_<time.time()>.pt` in the
folder, then resets: the layout of sglang/srt/eplb/expert_distribution.py's _StatAccumulator. Beside
each dump it writes `standin-<time>.json`, the buffer's own sum by torch, for the tests to hold
tokentop's torch-free reading against.

The routing is a rule, not a model: position i of forward pass p goes, in layer l, to the TOP_K
experts (p·5 + i·3 + l + j) mod EXPERTS, j < TOP_K (distinct), so every count is known."""

from __future__ import annotations

import json
import time
from pathlib import Path

LAYERS, EXPERTS, TOP_K, BUFFER = 4, 16, 2, 64
PROMPT_POSITIONS = 8  # the stand-in's prompt, as its usage counts it
STARTED = "Start recording the expert distribution.\n"  # SGLang's own answers
DUMPED = "Dump expert distribution record.\n"
METRICS = "# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 0.0\n"


class Recorder:
    def __init__(self, folder: str):
        import torch

        self.folder = Path(folder)
        self.buffer = torch.zeros((BUFFER, LAYERS, EXPERTS), dtype=torch.int32)
        self.index = self.passes = 0
        self.recording = False

    def forward(self, positions: int) -> None:
        """One forward pass of `positions` positions (a prefill's prompt, or a decode's one)."""
        p = self.passes
        self.passes += 1
        if not self.recording:
            return
        row = self.buffer[self.index]
        row.zero_()  # a wrapped buffer's pass replaces the oldest, as SGLang's _CircularBuffer does
        for i in range(positions):
            for layer in range(LAYERS):
                for j in range(TOP_K):
                    row[layer, (p * 5 + i * 3 + layer + j) % EXPERTS] += 1
        self.index = (self.index + 1) % BUFFER

    def start(self) -> None:
        self.buffer.zero_()
        self.index, self.recording = 0, True

    def dump(self) -> None:
        import torch

        stamp = time.time()
        data = {"rank": 0, "logical_count": self.buffer.clone(), "average_utilization_rate_over_window": None}
        torch.save(data, self.folder / f"expert_distribution_recorder_{stamp}.pt")
        used = int((self.buffer.sum(dim=(1, 2)) > 0).sum())
        (self.folder / f"standin-{stamp}.json").write_text(json.dumps({"counts": self.buffer.sum(0).tolist(), "passes": used}))
        self.start()  # dump_record resets; the recording goes on


def routes(recorder: Recorder) -> list:
    from aiohttp import web

    async def start(request: web.Request) -> web.Response:
        recorder.start()
        return web.Response(text=STARTED)

    async def dump(request: web.Request) -> web.Response:
        recorder.dump()
        return web.Response(text=DUMPED)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=METRICS, content_type="text/plain")

    return [
        web.post("/start_expert_distribution_record", start),
        web.post("/dump_expert_distribution_record", dump),
        web.get("/metrics", metrics),
    ]
