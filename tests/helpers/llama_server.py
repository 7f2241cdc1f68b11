"""The real llama.cpp HTTP server (the `xllamacpp` wheel) on the bundled GGUF, on 127.0.0.1, for the
attach tests and benchmarks: `python -m tests.helpers.llama_server [--port N] [--no-metrics] [--api-key-env VAR]
[--slots N] [--http-threads N] [--grammar GBNF]` prints its URL on stdout and serves until killed or until stdin closes; `LlamaServer`
starts one in a process of its own.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--no-metrics", action="store_true")
    p.add_argument("--api-key-env", default=None)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--grammar", default=None, help="a GBNF grammar every answer follows (the server's default for requests that name none)")
    p.add_argument("--http-threads", type=int, default=-1, help="connections served at once (llama.cpp's default: slots + 2, or cores - 1 if more)")
    args = p.parse_args()
    import xllamacpp

    from tui_app.engine.models import find_default_gguf

    params = xllamacpp.CommonParams()
    params.model.path = str(find_default_gguf())
    params.port = args.port
    params.endpoint_metrics = not args.no_metrics
    params.endpoint_props = True
    params.n_parallel = args.slots
    params.n_ctx = args.ctx
    params.n_threads_http = args.http_threads
    # One thread each: two spin against each other on a 2-core machine.
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.model_alias = {"smollm2"}
    if args.grammar:
        grammar = xllamacpp.CommonGrammar()
        grammar.grammar = args.grammar
        params.sampling.grammar = grammar
    if args.api_key_env:
        params.api_keys = [os.environ[args.api_key_env]]
    server = xllamacpp.Server(params)
    print(server.listening_address, flush=True)
    sys.stdin.read()  # until the test closes our stdin (or kills us)


class LlamaServer:
    """A real llama.cpp server process on 127.0.0.1 (tests/llama_server.py)."""

    def __init__(self, *options: str, env: dict | None = None):
        self.options = options
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.llama_server", *options],
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.url = ""
        for line in self.proc.stdout:  # llama.cpp's own log lines may come first
            if line.startswith("http://"):
                self.url = line.strip()
                break
        if not self.url:
            raise RuntimeError(f"llama.cpp server did not start (exit {self.proc.wait()})")
        # Whatever it prints later is read and dropped, so a full pipe never blocks the server.
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        self.port = int(self.url.rsplit(":", 1)[1])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except Exception:  # noqa: BLE001 - a server that ignores stdin is killed
                self.kill()


if __name__ == "__main__":
    main()
