"""Attach: a running inference server as a source of the same events the engine emits.

`client.py` streams requests through the server's OpenAI-compatible API and scrapes its
Prometheus /metrics; `discover.py` finds servers on this host and the process behind a port.
"""
