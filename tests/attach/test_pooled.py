"""Streams back to back on one kept connection, against the real llama.cpp server: it closes its
connection after each streamed completion without saying so, and a request that leaves before that
close has reached the client gets no response (tui_app/attach/pooled.py). Each is sent again,
so none is lost; a connection that stays open is kept for the next."""

from __future__ import annotations

from monitors.events import EngineError
from tests.attach.test_attach import attached
from tui_app.requests import RunRequest

RUNS = 16  # without the retry, 3 in 10 back-to-back streams on one connection to llama.cpp failed


async def test_back_to_back_streams_on_one_connection_all_end_whole(llama_server):
    client, _, events = await attached(llama_server.url, max_connections=1)
    try:
        fins = [await client.run(RunRequest(prompt=f"Say a number: {i}", max_new_tokens=2, ignore_eos=True)) for i in range(RUNS)]
    finally:
        await client.aclose()
    assert [e.message for e in events if isinstance(e, EngineError)] == []
    assert all(f is not None and f.stop_reason == "max tokens" and f.n_tokens == 2 for f in fins)
