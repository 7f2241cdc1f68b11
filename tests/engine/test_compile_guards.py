"""The compiled step trusts dynamo's differentiating guards only for shapes it has warmed: a new
batch size or cache length must still recompile, and every shape must give the eager tokens."""

import pytest
import torch

from benchmarks.framework_overhead import tiny_llama
from monitors.events import Step
from tui_app.commands.bench import apply_levers
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.requests import RunRequest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, device):
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama(str(folder))
    events = []

    def feed(ev):
        if isinstance(ev, Step):  # which guards dynamo checked for this step
            ev.trusted = torch._dynamo.eval_frame._is_skip_guard_eval_unsafe_stance()
        events.append(ev)

    engine = Engine(EngineConfig(model=str(folder), device=device, dtype="fp32"), feed)
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
