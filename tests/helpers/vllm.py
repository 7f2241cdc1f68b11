"""Real vLLM (its CPU build, from the venv TOKENTOP_VLLM_PYTHON names) on the default model's
safetensors copy, on 127.0.0.1: one start-up for every test that needs a vLLM server, with the
extra flags and environment a test asks for (OTLP traces, a smaller scheduler).
`python -m tests.helpers.vllm [FLAGS...]` starts one and prints its URL, for trying things by hand."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

VLLM_PYTHON = os.environ.get("TOKENTOP_VLLM_PYTHON")
START_S = 600  # a cold start on 2 busy cores takes a minute or more
SKIP = "real vLLM runs from its own venv: `make test` installs it and runs these tests with TOKENTOP_VLLM_PYTHON set"


class VllmError(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(log: Path, *flags: str, env: dict | None = None, port: int | None = None, model: Path | None = None) -> Iterator[str]:
    """The server's URL once it answers /v1/models, serving `model` (the default model's copy unless
    named); stopped on leaving. VllmError with its log's tail when it exits or does not answer
    within START_S."""
    if not VLLM_PYTHON:
        raise VllmError(SKIP)
    from tui_app.engine.models import converted_default

    port = port or free_port()
    # Its IPC sockets and rendezvous files in a folder of its own, beside its log, removed with the
    # test's: in the shared temporary folder each start left a dozen behind (637 on a CI machine).
    own_tmp = log.parent / "tmp"
    own_tmp.mkdir(exist_ok=True)
    environ = {
        **os.environ,
        "TMPDIR": str(own_tmp),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        **(env or {}),
    }
    cmd = [
        VLLM_PYTHON,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model or converted_default()),
        "--served-model-name",
        "smollm2",
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "2048",
        "--enforce-eager",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *flags,
    ]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=environ)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + START_S
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise VllmError(f"vLLM exited with {proc.returncode}:\n" + log.read_text()[-3000:])
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            raise VllmError(f"vLLM did not answer within {START_S} s:\n" + log.read_text()[-3000:])
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def vllm_fixture(log: Path, *flags: str, **kw) -> Iterator[str]:
    """vllm_server for a fixture: the test skips where no vLLM venv is named, and fails with the
    server's log where one is named and the server will not start."""
    import pytest

    try:
        with vllm_server(log, *flags, **kw) as url:
            yield url
    except VllmError as exc:
        if not VLLM_PYTHON:
            pytest.skip(str(exc))
        pytest.fail(str(exc))


if __name__ == "__main__":
    with vllm_server(Path("vllm.log"), *sys.argv[1:]) as served:
        print(served, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            sys.stdin.read()
