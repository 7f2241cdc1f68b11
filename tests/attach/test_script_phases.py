"""A watched generate() of a reasoning model (attach/script_hook.py, as `tokentop.watch` hooks it):
the small thinking Qwen3 of tests/helpers/tiny_models.py, a logits processor of the test's own
closing the think span at a known step, the events sent by the hook's writer to a real listener's
socket. The script's generation is its own: the phases are read, never changed."""

from __future__ import annotations

import functools
import time
import weakref

from benchmarks.common.deadline import Deadline
from monitors.events import RunFinished, Step
from tests.helpers.tiny_models import save_thinker

CLOSE_AT = 4  # the 5th new token is `</think>`
NEW = 9


def test_a_watched_generate_reads_the_think_span_from_the_tokenizer(tmp_path):
    import torch
    import transformers as tf

    from tui_app.attach.hook_writer import Writer
    from tui_app.attach.listen import Listener
    from tui_app.attach.script_hook import Hook

    tok = save_thinker(tmp_path / "m")
    model = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "m").eval()
    close_id = tok.convert_tokens_to_ids("</think>")

    class CloseAt(tf.LogitsProcessor):
        def __call__(self, input_ids, scores):
            if input_ids.shape[1] - prompt.shape[1] == CLOSE_AT:
                scores[:, close_id] = scores.max() + 100
            return scores

    listener = Listener(tmp_path / "s.sock")
    hook = Hook(Writer(tmp_path / "s.sock"))
    hook.writer.start()
    hook.latest = weakref.ref(tok)
    model.generate = functools.partial(hook.generate, type(model).generate, model)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Why?"}], add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    try:
        with torch.inference_mode():
            out = model.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, logits_processor=[CloseAt()])
    finally:
        hook.close()
    events: list = []
    deadline = Deadline(30)
    while not any(isinstance(e, RunFinished) for e in events) and not deadline.passed():
        events += listener.drain()
        time.sleep(0.05)
    listener.close()
    new = out[0, prompt.shape[1] :].tolist()
    assert new[CLOSE_AT] == close_id and close_id not in new[:CLOSE_AT]
    steps = [e for e in events if isinstance(e, Step)]
    assert [t for s in steps for t in s.token_ids] == new
    assert [s.phase for s in steps] == ["thinking"] * (CLOSE_AT + 1) + ["answer"] * (NEW - CLOSE_AT - 1)
