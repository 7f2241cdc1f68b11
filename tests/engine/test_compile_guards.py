"""The compiled step trusts dynamo's differentiating guards only for shapes it has warmed: a new
batch size or cache length must still recompile, and every shape must give the eager tokens."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import StaticCache

from benchmarks.engine.framework_overhead import tiny_llama
from monitors.events import Step
from tui_app.commands.bench import apply_levers
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.requests import RunRequest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, device):
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama(str(folder))
    events = []

    def feed(ev):
        if isinstance(ev, Step):  # which guards dynamo checked for this step
            ev.trusted = torch._dynamo.eval_frame._is_skip_guard_eval_unsafe_stance()
        events.append(ev)

    # The compiled step's shapes are the batch's: the run's prompt replicated (distinct prompts refuse compile).
    engine = Engine(EngineConfig(model=str(folder), device=device, dtype="fp32", batch_prompts="replicated"), feed)
    engine.load()
    engine.events = events
    return engine


def tokens(engine, batch, prompt_len):
    assert apply_levers(engine, {"batch": batch, "compile": engine.levers.compile}) == ""
    req = RunRequest(prompt_ids=[(7 * i) % 200 + 3 for i in range(prompt_len)], max_new_tokens=40, ignore_eos=True)
    engine.events.clear()
    engine.run(req)
    steps = [s for s in engine.events if isinstance(s, Step)]
    engine.trusted = [s.trusted for s in steps if s.kind == "decode"]
    return [s.token_ids for s in steps]  # every row's tokens, step by step


@pytest.mark.slow
def test_each_compiled_shape_gives_the_eager_tokens(tiny):
    shapes = [(1, 1), (2, 1), (1, 1), (1, 300), (2, 1)]  # batch, prompt tokens: 300 + 40 needs a 512-slot cache
    assert apply_levers(tiny, {}) == ""
    eager = {shape: tokens(tiny, *shape) for shape in set(shapes)}
    assert apply_levers(tiny, {"compile": True}) == ""
    for shape in shapes:
        assert tokens(tiny, *shape) == eager[shape], shape
        assert all(tiny.trusted)  # each compiled decode step ran on the reduced guards
    assert not tiny.control.trusting  # a run gives the process its default stance back
    assert {(b, n) for _, b, n in tiny.control.warm} == {(1, 256), (2, 256), (1, 512)}


def graph_breaks_of(folder: str, device: str) -> dict:
    """The tiny Llama compiled clean, then with an MLP activation that leaves the graph planted in
    its first layer: each compile phase's graph breaks, the ledger's sum, explain's graph count."""
    from monitors.events import Phase
    from tui_app.core.ledger import one_time
    from tui_app.core.session import Session

    class Leaving(torch.nn.Module):
        def __init__(self, act):
            super().__init__()
            self.act = act

        def forward(self, x):
            torch._dynamo.graph_break()
            return self.act(x)

    tiny_llama(folder)
    session = Session()
    engine = Engine(EngineConfig(model=folder, device=device, dtype="fp32", batch_prompts="replicated"), session.feed)
    engine.load()
    phases: list[Phase] = []
    session.listeners.append(lambda ev: phases.append(ev) if isinstance(ev, Phase) and ev.name == "compile" and ev.done else None)
    req = RunRequest(prompt_ids=[3, 5, 7], max_new_tokens=4, ignore_eos=True)
    apply_levers(engine, {"compile": True})
    engine.run(req)
    clean = [(p.graph_breaks, p.detail) for p in phases]
    mlp = engine.model.model.layers[0].mlp
    mlp.act_fn = Leaving(mlp.act_fn)
    apply_levers(engine, {"compile": True, "batch": 2})  # a new shape (the prompt replicated): traced again, through the plant
    engine.run(req)
    broken = [(p.graph_breaks, p.detail) for p in phases[len(clean) :]]
    step = engine.decoder.lean_step(engine.model).static_step
    cache = StaticCache(config=engine.model.config, max_cache_len=64, max_batch_size=1)
    zeros = torch.zeros((1, 1), dtype=torch.long, device=device)
    graphs = torch._dynamo.explain(step)(zeros, cache, zeros).graph_count
    return {"clean": clean, "broken": broken, "ledger": one_time(session, engine.levers)[2], "explained_graphs": graphs}


@pytest.mark.slow
def test_a_graph_break_in_the_step_is_counted_and_a_clean_step_has_none(tmp_path, device):
    """The compile phase carries dynamo's own count of graph breaks: none for the tiny Llama's step,
    some once a break is planted (one torch._dynamo.explain sees too: more than one graph), and
    the ledger's one-time cost of the mix sums them. In a process of its own: dynamo keeps its
    caches per code object, every engine in a process runs the same step function, and a planted
    break's entries there make another engine's trusted compiled step miss and recompile."""
    code = "import json, sys; from tests.engine.test_compile_guards import graph_breaks_of as g; print(json.dumps(g(*sys.argv[1:])))"
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path), device], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["clean"] and all(n == 0 and "graph break" not in detail for n, detail in got["clean"]), got
    broken = sum(n for n, _ in got["broken"])
    assert broken >= 1 and "graph break" in got["broken"][0][1] and got["ledger"] == broken, got
    assert got["explained_graphs"] > 1, got
