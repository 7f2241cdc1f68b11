"""The real vLLM (its CPU build, in a venv of its own that `make test` installs) serving the default
model's safetensors copy on 127.0.0.1, for the vLLM tier: one server for the whole session."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

import httpx

from tests.helpers.prometheus import free_port

VLLM_PYTHON = os.environ.get("TOKENTOP_VLLM_PYTHON")
SKIP = "real vLLM runs from its own venv: `make test` installs it and runs these tests with TOKENTOP_VLLM_PYTHON set"


@contextlib.contextmanager
def vllm_server(log_path: str):
    """The server's URL once it answers /v1/models; RuntimeError with its log's end if it does not."""
    from tui_app.engine.models import converted_default

    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    args = ["--model", str(converted_default()), "--served-model-name", "smollm2", "--dtype", "bfloat16", "--max-model-len", "2048", "--enforce-eager"]
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            [VLLM_PYTHON or "python", "-m", "vllm.entrypoints.openai.api_server", *args, "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"

    def log_end() -> str:
        with open(log_path) as f:
            return f.read()[-3000:]

    try:
        end = time.monotonic() + 600
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode}:\n" + log_end())
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            raise RuntimeError("vLLM did not answer within 600 s:\n" + log_end())
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
