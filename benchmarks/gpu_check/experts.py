"""An MoE on CUDA: the routing counts (tui_app/engine/routing.py) against a recount of each
router's own top-k, and the device→host syncs a token with the counting on and off (it must add
none: the counts ride the step's one read). A random-weight Qwen3-MoE with the default model's
tokenizer (tests/helpers/tiny_models.py's config, 8 layers of 32 experts, 4 a token), in bf16."""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmarks.gpu_check.report import Failed

SIZES = {"hidden_size": 512, "num_hidden_layers": 8, "head_dim": 64, "num_experts": 32, "num_experts_per_tok": 4, "moe_intermediate_size": 256}


def random_moe(folder: Path, tok: Path, device: str, sizes: dict) -> Path:
    import torch
    from transformers import AutoTokenizer

    from tests.helpers.tiny_models import moe_config, routers

    torch.manual_seed(0)
    cls, cfg = moe_config("qwen3moe", vocab_size=len(AutoTokenizer.from_pretrained(str(tok))), **sizes)
    with torch.device(device):
        model = cls(cfg).to(torch.bfloat16)
    model.save_pretrained(folder)
    for f in tok.iterdir():
        if f.is_file() and f.name != "config.json" and not (folder / f.name).exists():
            shutil.copy2(f, folder / f.name)
    assert routers(model), "no router found in the random MoE"
    return folder


def check_moe_routing(folder: Path, tok: Path, device: str, sizes: dict | None = None, dtype: str = "bf16") -> tuple[str, str]:
    import torch

    from benchmarks.gpu_check.models import Bench
    from monitors.events import RunFinished
    from monitors.host_reads import count_host_reads
    from tests.helpers.tiny_models import routers
    from tui_app.requests import RunRequest

    sizes = {**SIZES, **(sizes or {})}
    bench = Bench(random_moe(folder, tok, device, sizes), device, dtype)
    engine = bench.engine
    if engine.routing is None:
        raise Failed("the MoE's routing is not counted on CUDA", engine.ready.routing_note)
    k, n = sizes["num_experts_per_tok"], sizes["num_experts"]
    recount = torch.zeros(sizes["num_hidden_layers"], n, dtype=torch.long, device=device)

    def hook(layer: int):
        def count(module, args, out):
            recount[layer] += torch.bincount(out[0].reshape(-1, n).float().topk(k, dim=-1).indices.flatten(), minlength=n)

        return count

    req = RunRequest(preset="short", max_new_tokens=32, ignore_eos=True)
    bench.run(req)  # warm
    handles = [r.register_forward_hook(hook(i)) for i, r in enumerate(routers(engine.model))]
    try:
        _, events = bench.run(req)
    finally:
        for h in handles:
            h.remove()
    (done,) = [e for e in events if isinstance(e, RunFinished)]
    ours = done.expert_counts
    # The engine's perplexity forward at the run's end passes the routers too, but only once per
    # weight variant, so the warm run took it.
    if ours != recount.tolist():
        raise Failed("the counts differ from the routers' own top-k", f"engine {ours[0]} vs recount {recount.tolist()[0]} (layer 0)")
    syncs = {}
    routing = engine.routing
    for counted in (True, False):
        engine.routing = routing if counted else None
        with count_host_reads(cuda=device.startswith("cuda")) as c:
            tokens, _ = bench.run(req)
        syncs[counted] = c.per_token(len(tokens))
    engine.routing = routing
    (reads_on, syncs_on), (reads_off, syncs_off) = syncs[True], syncs[False]
    figure = (
        f"counts = recount over {sum(ours[0]) // k} positions; "
        f"host reads/token {reads_on:.2f} on vs {reads_off:.2f} off, CUDA syncs/token {syncs_on} vs {syncs_off}"
    )
    if reads_on != reads_off or syncs_on != syncs_off:
        raise Failed("the counting adds a host read or a sync", figure)
    return figure, "each router's top-k of its logits, counted by a hook of the check's own; reads and syncs with the counting off"
