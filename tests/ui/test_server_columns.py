"""The runs table attached to a server: the prompt's tokens told apart from the cached ones, the
engine's own columns (perplexity, plain greedy, KV cache per run) left out, the server's account in
their place, each checked against the real llama.cpp server."""

import httpx

from tests.ui.test_app import APP_SIZE, finished, until
from tui_app.attach.client import AttachConfig
from tui_app.core.columns import COLUMNS, columns_for
from tui_app.core.session import Session
from tui_app.core.sources import AttachSource
from tui_app.requests import RunRequest
from tui_app.ui.app import TokentopApp
from tui_app.ui.widgets.runs_table import RunsTable

PROMPT = "Name three rivers of Europe and say where each one meets the sea."


async def test_a_cached_prompt_reads_its_tokens_and_the_cached_share(llama_server, tmp_path):
    # The chat template's tokens as the server counts them, asked of the server itself.
    template = httpx.post(llama_server.url + "/apply-template", json={"messages": [{"role": "user", "content": PROMPT}]}, timeout=60).json()["prompt"]
    n_prompt = len(httpx.post(llama_server.url + "/tokenize", json={"content": template, "add_special": True}, timeout=60).json()["tokens"])
    request = RunRequest(prompt=PROMPT, max_new_tokens=4, ignore_eos=True)
    app = TokentopApp(AttachSource([AttachConfig(url=llama_server.url)]), request, fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=APP_SIZE) as pilot:
        await until(pilot, lambda: finished(app) >= 1, timeout=60, what="the first run")
        await pilot.press("r")
        await until(pilot, lambda: finished(app) >= 2, timeout=60, what="the same prompt again")
        table = app.query_one(RunsTable)
        table.dirty = True
        table.redraw(force=True)
        text = "\n".join(strip.text for strip in table._strips)
        header = text.splitlines()[0]
        second = app.session.timer.runs[app.session.finished_ids[-1]].finished
        await pilot.press("q")
    # The same prompt a second time: the server computes only its last token again (llama.cpp keeps
    # one to sample from), so all but one are cached; the prompt is still the whole prompt.
    assert second.prompt_tokens == n_prompt and second.server["cached_tokens"] == n_prompt - 1
    assert f"{n_prompt} ({n_prompt - 1} cached)" in text
    for engine_only in ("ppl", "vs plain greedy", "KV MiB"):
        assert engine_only not in header
    assert "server prefill ms" in header and "end" in header
    assert f"{second.server['prompt_ms']:.1f}" in text  # the server's own timings.prompt_ms


def test_engine_runs_keep_the_engine_columns():
    from tests.helpers.synthetic import session_events

    # The roofline's wall, only where a run was profiled, the GPU's slowed time and energy, and a
    # reasoning model's TTFA and thinking: none here.
    hidden = ("wall", "GPU slowed", "J/token", "tok/s/W", "TTFA ms", "think")
    assert columns_for(Session.from_events(session_events(runs=1)).rows()) == tuple(c for c in COLUMNS if c.title not in hidden)
