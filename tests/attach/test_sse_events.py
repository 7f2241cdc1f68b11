"""The event-stream decoder of the streams' transport (tui_app/attach/pooled.py) against the format's
rules: data lines joined, a blank line ends an event, comments and other fields skipped, CRLF, LF or
CR ending a line, a byte-order mark dropped, and the same events however the bytes are split
between reads (the real servers' streams go through it in test_attach.py, the vLLM tier and the
chaos tier's proxy, which splits a stream at every byte)."""

from __future__ import annotations

import json

import pytest

from tui_app.attach.pooled import SseDecoder


def decoded(pieces: list[bytes]) -> list[str]:
    d = SseDecoder()
    out = [data for piece in pieces for data in d.feed(piece)]
    return out + d.end()


def every_split(stream: bytes) -> list[list[bytes]]:
    """The stream in one read, a byte a read, and cut in two at every place."""
    return [[stream], [bytes([b]) for b in stream]] + [[stream[:k], stream[k:]] for k in range(1, len(stream))]


CHUNKS = [json.dumps({"choices": [{"text": t}]}) for t in ("Hé", "llo", " wörld")]
STREAM = b": ping\n\n" + b"".join(f"data: {c}\r\n\r\n".encode() for c in CHUNKS) + b"event: x\nid: 7\nretry: 10\ndata:[DONE]\n\n"


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_line_end_and_every_split_gives_the_same_events(eol):
    stream = STREAM.replace(b"\r\n", b"\n").replace(b"\n", eol)
    for pieces in every_split(stream):
        assert decoded(pieces) == [*CHUNKS, "[DONE]"], pieces


def test_data_lines_join_and_fields_follow_the_format():
    stream = b"data: one\ndata:two\ndata\ndata:  three\n\n:comment\nnot a field\ndatum: x\n\n"
    assert decoded([stream]) == ["one\ntwo\n\n three"]


def test_a_byte_order_mark_is_dropped_even_split():
    stream = b"\xef\xbb\xbfdata: a\n\n"
    for pieces in every_split(stream):
        assert decoded(pieces) == ["a"]


def test_a_stream_that_ends_without_its_blank_line_still_gives_its_last_event():
    assert decoded([b"data: a\n\ndata: [DONE]"]) == ["a", "[DONE]"]
    assert decoded([b"data: a\n\ndata: [DONE]\n"]) == ["a", "[DONE]"]
    assert decoded([b"data: a\n\n: only a comment"]) == ["a"]


def test_the_streams_take_the_proxy_the_environment_names_unless_no_proxy_leaves_the_host_out(monkeypatch):
    from tui_app.attach.pooled import env_proxy

    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("http://gpu-box:8000/v1") is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert env_proxy("http://gpu-box:8000/v1") == "http://proxy.example:3128"
    assert env_proxy("https://gpu-box/v1") is None  # HTTPS_PROXY is its own
    monkeypatch.setenv("NO_PROXY", "localhost,gpu-box")
    assert env_proxy("http://gpu-box:8000/v1") is None
    assert env_proxy("http://other:8000/v1") == "http://proxy.example:3128"
