import os
import subprocess
import time

import httpx
import pytest

from tests.helpers.llama_server import LlamaServer
from tui_app.engine.models import converted_default

# Library chatter (torchao's optional kernels, transformers' progress bars) is not what tests check.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Snapshots must not catch a colour mid-transition.
os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
# Forced, not defaulted: a user's own TOKENTOP_DATA is their real recordings folder, and tests
# (those that run the CLI in a subprocess inherit this) must never write there.
TEST_DATA = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "tokentop-data"))
os.environ["TOKENTOP_DATA"] = TEST_DATA
# The vLLM tier's server runs from its own venv (`make test` installs it and sets this).
VLLM_PYTHON = os.environ.get("TOKENTOP_VLLM_PYTHON")


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", help="where tests that take a device run the engine: cpu (default) or cuda[:N] (docs/gpu.md)")


def pytest_collection_modifyitems(config, items):
    """Browser tests last: they start a server and a browser, and a failure there should not hide the rest.
    GPU tests skip, saying why, where torch sees no CUDA device."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu:
        import torch

        if not torch.cuda.is_available():
            skip = pytest.mark.skip(reason=f"needs a CUDA GPU: torch {torch.__version__} sees none")
            for item in gpu:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def device(request) -> str:
    return request.config.getoption("--device")


@pytest.fixture(scope="session")
def engine_events():
    return []


@pytest.fixture(scope="session")
def engine(engine_events, device):
    """The real default model, loaded once for the whole session, in this process, on --device."""
    from tui_app.engine.generation import Engine, EngineConfig
    from tui_app.engine.models import ModelError, find_default_gguf, resolve_device

    if device != "cpu":
        try:
            resolve_device(device)
            find_default_gguf()
        except ModelError as exc:  # no such device, or the lent GPU machine: the GGUF does not travel there (docs/gpu.md)
            pytest.skip(f"needs --device {device} and the default model's real weights: {exc}")
    eng = Engine(EngineConfig(device=device), engine_events.append)
    eng.load()
    return eng


@pytest.fixture
def collect(engine, engine_events):
    """Events emitted by the shared engine during one test."""
    engine_events.clear()
    return engine_events


@pytest.fixture
def plain(engine):
    """Reset the shared engine's levers to plain before and after a test."""
    from tui_app.commands.bench import apply_levers

    apply_levers(engine, {})
    yield engine
    apply_levers(engine, {})


@pytest.fixture(scope="session")
def vllm_url(tmp_path_factory, unused_tcp_port_factory):
    """The real vLLM (its CPU build) on the default model's safetensors copy, shared by the vLLM tier."""
    if not VLLM_PYTHON:
        pytest.skip("real vLLM runs from its own venv: `make test` installs it and runs these tests with TOKENTOP_VLLM_PYTHON set")
    port = unused_tcp_port_factory()
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                VLLM_PYTHON,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(converted_default()),
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
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 600
        while time.monotonic() < end:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode}:\n" + log.read_text()[-3000:])
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            pytest.fail("vLLM did not answer within 600 s:\n" + log.read_text()[-3000:])
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def llama_server():
    """The real llama.cpp server on the bundled GGUF, shared by the attach tests."""
    server = LlamaServer()
    yield server
    server.close()
