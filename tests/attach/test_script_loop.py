"""attach/script_loop.py: a hand-written loop's forwards read as runs, in this process on --device
(a small random-weight Llama), sent by the hook's own writer thread to a real listener's socket
(attach/listen.py), as a notebook's are. tests/attach/test_script.py runs such loops on the
default model under `tokentop -- python`."""

from __future__ import annotations

import time

from benchmarks.common.deadline import Deadline
from monitors.events import RunFinished, RunStarted, Step


def test_a_loop_goes_on_by_its_cache_or_by_its_input_and_anything_else_starts_a_run(device, tmp_path):
    """A batch of two fed back whole (no cache): one run, cache off with the reason, no KV. A loop
    with the cache it gets back: one run, its KV measured. A forward one token longer whose earlier
    tokens differ: on the CPU a run of its own; on a device the shape alone is compared (reading the
    tokens would wait on the device), so it goes on."""
    import torch
    import transformers as tf

    from tui_app.attach.hook_writer import Writer
    from tui_app.attach.listen import Listener
    from tui_app.attach.script_hook import Hook
    from tui_app.attach.script_loop import NO_CACHE

    config = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    model = tf.LlamaForCausalLM(config).to(device).eval()
    listener = Listener(tmp_path / "loop.sock")
    hook = Hook(Writer(tmp_path / "loop.sock"))
    hook.writer.start()
    model.register_forward_pre_hook(hook.loop.pre, with_kwargs=True)
    model.register_forward_hook(hook.loop.post, with_kwargs=True)
    try:
        with torch.inference_mode():
            ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]], device=device)
            for _ in range(6):  # 6 forwards: 5 tokens fed back
                ids = torch.cat([ids, model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            ids, cache = torch.tensor([[9, 10, 11]], device=device), None
            for _ in range(4):
                out = model(input_ids=ids, cache=cache, use_cache=True)
                ids, cache = out.logits[:, -1:].argmax(-1), out.cache
            model(input_ids=torch.tensor([[1, 2, 3]], device=device))
            model(input_ids=torch.tensor([[4, 5, 6, 7]], device=device))
    finally:
        hook.close()
    events = []
    deadline = Deadline(30)
    while sum(isinstance(e, RunFinished) for e in events) < 3 + (device == "cpu") and not deadline.passed():
        events += listener.drain()
        time.sleep(0.05)
    listener.close()
    started = [e for e in events if isinstance(e, RunStarted)]
    steps = {s.run_id: [e for e in events if isinstance(e, Step) and e.run_id == s.run_id] for s in started}
    finished = {e.run_id: e for e in events if isinstance(e, RunFinished)}
    whole, cached, *last = started
    assert [whole.prompt_tokens, whole.levers.batch, whole.levers.cache, whole.cache_note] == [4, 2, False, NO_CACHE]
    assert finished[whole.run_id].n_tokens == len(steps[whole.run_id]) == 5
    assert not any(s.kv_bytes or s.kv_alloc_bytes for s in steps[whole.run_id])
    assert [cached.prompt_tokens, cached.levers.cache, cached.cache_note, finished[cached.run_id].n_tokens] == [3, True, "", 3]
    # K and V, fp32, 2 layers, 2 KV heads of 8: every token but the newest in the cache
    assert [s.kv_bytes for s in steps[cached.run_id]] == [2 * 4 * 2 * 2 * 8 * n for n in (3, 4, 5)]
    if device == "cpu":
        assert [(s.prompt_tokens, finished[s.run_id].n_tokens) for s in last] == [(3, 0), (4, 0)]
    else:
        assert [(s.prompt_tokens, finished[s.run_id].n_tokens) for s in last] == [(3, 1)]
