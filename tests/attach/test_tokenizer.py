"""Prompts of an exact token length by the real llama.cpp server's own tokenizer: every one is as
long as asked when the server reads it again, and each is its own text, wherever in its sequence a
run's prompts start."""

from __future__ import annotations

import pytest

from tests.attach.test_attach import attached
from tui_app.attach.tokenizer import Prompts


# The run's start is random (SALT): the first variants, and two starts where a text read again
# merged two tokens in 4 of 8 prompts before the tail was made up for (2 of 40 random starts did).
@pytest.mark.parametrize("start", [0, 140_892, 511_555])
async def test_every_prompt_is_as_long_as_asked_by_the_servers_count(llama_server, start):
    client, _, _ = await attached(llama_server.url)
    try:
        prompts = Prompts(client, None, shared_prefix=0)
        prompts.made = start
        texts = await prompts.make(64, 24)
        counted = [await prompts._tokens(t) for t in texts]
    finally:
        await client.aclose()
    assert [len(ids or []) for ids in counted] == [64] * 24
    assert len(set(texts)) == 24
