"""Real vLLM (its CPU build, from the venv TOKENTOP_VLLM_PYTHON names) on the default model's
safetensors copy, on 127.0.0.1: one start-up for every test that needs a vLLM server, with the
extra flags and environment a test asks for (OTLP traces, a smaller scheduler), the tier's servers
started together (AHEAD).
`python -m tests.helpers.vllm [FLAGS...]` starts one and prints its URL, for trying things by hand."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

VLLM_PYTHON = os.environ.get("TOKENTOP_VLLM_PYTHON")
START_S = 600  # a cold start on 2 busy cores takes a minute or more
SKIP = "real vLLM runs from its own venv: `make test` installs it and runs these tests with TOKENTOP_VLLM_PYTHON set"


class VllmError(Exception):
    pass


def free_port() -> int:
    """A free port for a server that binds it later, below the kernel's range for outgoing
    connections: a port the kernel picks (a bind to 0) lies in that range, where a client's
    connection (a tier's tests make hundreds a minute) may take it before the server binds it, and
    an OTLP receiver binds the port its vLLM was started with minutes later (AHEAD)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):  # not Linux: its own range starts higher
        low = 32768
    pick = random.SystemRandom()
    for port in [pick.randrange(10_000, low) for _ in range(50)] if low > 11_000 else []:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """A real vLLM serving `model` (the default model's copy unless named), started at once; `wait`
    gives its URL once it answers /v1/models."""

    def __init__(self, log: Path, *flags: str, env: dict | None = None, port: int | None = None, model: Path | None = None):
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
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=environ)
        self.url = f"http://127.0.0.1:{port}"
        self.deadline = time.monotonic() + START_S
        self.ready = False

    def wait(self) -> str:
        """The URL once the server answers; VllmError with its log's tail when it exits or does not
        answer within START_S of its start."""
        while not self.ready:
            if self.proc.poll() is not None:
                raise VllmError(f"vLLM exited with {self.proc.returncode}:\n" + self.log.read_text()[-3000:])
            if time.monotonic() > self.deadline:
                raise VllmError(f"vLLM did not answer within {START_S} s:\n" + self.log.read_text()[-3000:])
            with contextlib.suppress(httpx.HTTPError):
                self.ready = httpx.get(self.url + "/v1/models", timeout=2).status_code == 200
            if not self.ready:
                time.sleep(1)
        return self.url

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def vllm_server(log: Path, *flags: str, **kw) -> Iterator[str]:
    """A VllmServer's URL once it answers; stopped on leaving."""
    server = VllmServer(log, *flags, **kw)
    try:
        yield server.wait()
    finally:
        server.close()


@dataclass
class Spec:
    """A server a fixture of the vLLM tier asks for: VllmServer's arguments, and what the fixture
    yields beside the URL (an OTLP receiver's address, a scripted model's tokens)."""

    flags: tuple[str, ...] = ()
    env: dict | None = None
    model: Path | None = None
    extra: Any = None


# The vLLM tier's servers by the name of the fixture that serves each: a function of a folder of its
# own to its Spec. tests/conftest.py's vllm_ahead starts those the session's tests ask for together.
AHEAD: dict[str, Callable[[Path], Spec]] = {}


def ahead(name: str) -> Callable:
    """Register the server of fixture `name` (a function of a folder to its Spec) with AHEAD."""

    def register(make: Callable[[Path], Spec]) -> Callable[[Path], Spec]:
        AHEAD[name] = make
        return make

    return register


def served(servers: dict, name: str) -> tuple[str, Any]:
    """(URL, the Spec's extra) of a server vllm_ahead started, once it answers: the test skips where no
    vLLM venv is named, and fails with the server's log where one is named and it will not start."""
    import pytest

    try:
        server, spec = servers[name]
        if isinstance(server, VllmError):
            raise server
        return server.wait(), spec.extra
    except VllmError as exc:
        if not VLLM_PYTHON:
            pytest.skip(str(exc))
        pytest.fail(str(exc))


if __name__ == "__main__":
    with vllm_server(Path("vllm.log"), *sys.argv[1:]) as url:
        print(url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            sys.stdin.read()
