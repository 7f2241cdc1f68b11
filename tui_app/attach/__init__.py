"""Attach: a running inference server as a source of the same events the engine emits, with no torch.

`client.py` streams requests through the server's OpenAI-compatible API and scrapes its
Prometheus /metrics, reading each stream's chunks with `sse.py` and wording failures with
`errors.py`; `loop.py` runs up to four clients behind one command loop in a process of their own;
`discover.py` finds servers on this host and the process behind a port.
"""
