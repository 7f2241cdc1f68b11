"""A server's expert-distribution recorder, as the SSE stand-in serves it (neither SGLang nor
lmdeploy runs here). `/start_expert_distribution_record` resets and starts it, and each forward pass
adds its positions' routing. Then `/dump_expert_distribution_record` writes the server's file:
- SGLang's (stat mode): a circular buffer of int32 [passes, layers, logical experts] saved as
  `torch.save({"rank", "logical_count", "average_utilization_rate_over_window"})` to
  `expert_distribution_recorder_<time.time()>.pt`, then reset; the layout of
  sglang/srt/eplb/expert_distribution.py's _StatAccumulator. It answers with a line of text.
- lmdeploy's (its pull request #3709): int64 [layers, experts] summed since the start, saved as
  `torch.save({"counts", "balancedness", "total_tokens", "step", "rank"})` to
  `rank0_step<passes>_expert_counts.pt`, not reset; it answers `{"filepaths": path}` (the uni
  executor's one path), or null while not recording; `lmdeploy-off` is one whose recorder is
  off (lmdeploy's no-op one: both endpoints answer 200, and the dump names no file).
Beside each dump it writes `standin-<time>.json`, the buffer's own sum by torch, for the tests to
hold tokentop's torch-free reading against.

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
# A gauge of each server's own, so that attach tells which it is.
METRICS = {
    s: f"# HELP {g} The number of running requests.\n# TYPE {g} gauge\n{g} 0.0\n"
    for s, g in (("sglang", "sglang:num_running_reqs"), ("lmdeploy", "lmdeploy:num_requests_running"))
}


class Recorder:
    def __init__(self, folder: str, server: str = "sglang"):
        import torch

        self.folder, self.server, self.off = Path(folder), server.removesuffix("-off"), server.endswith("-off")
        self.buffer = torch.zeros((BUFFER, LAYERS, EXPERTS), dtype=torch.int32)
        self.index = self.passes = self.recorded = 0
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
        self.recorded += 1

    def start(self) -> None:
        self.buffer.zero_()
        self.index, self.recorded, self.recording = 0, 0, not self.off

    def dump(self) -> str | None:
        """The file written, or None where the server writes none (lmdeploy's, not recording)."""
        import torch

        if self.server == "lmdeploy" and not self.recording:
            return None
        stamp = time.time()
        counts = self.buffer.sum(0)
        if self.server == "lmdeploy":
            counts = counts.long()
            f = counts.float()
            data = {
                "counts": counts,
                "balancedness": (f.mean(1) + 1e-5) / (f.max(1).values + 1e-5),
                "total_tokens": counts.sum(1),
                "step": self.recorded,
                "rank": 0,
            }
            path = self.folder / f"rank0_step{self.recorded}_expert_counts.pt"
        else:
            data = {"rank": 0, "logical_count": self.buffer.clone(), "average_utilization_rate_over_window": None}
            path = self.folder / f"expert_distribution_recorder_{stamp}.pt"
        torch.save(data, path)
        used = int((self.buffer.sum(dim=(1, 2)) > 0).sum())
        (self.folder / f"standin-{stamp}.json").write_text(json.dumps({"counts": counts.tolist(), "passes": used}))
        if self.server == "sglang":
            self.start()  # SGLang's dump resets; the recording goes on
        return str(path)


def routes(recorder: Recorder) -> list:
    from aiohttp import web

    async def start(request: web.Request) -> web.Response:
        recorder.start()
        return web.Response(text=STARTED) if recorder.server == "sglang" else web.Response()

    async def dump(request: web.Request) -> web.Response:
        path = recorder.dump()
        return web.Response(text=DUMPED) if recorder.server == "sglang" else web.json_response({"filepaths": path})

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=METRICS[recorder.server], content_type="text/plain")

    return [
        web.post("/start_expert_distribution_record", start),
        web.post("/dump_expert_distribution_record", dump),
        web.get("/metrics", metrics),
    ]
