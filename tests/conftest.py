import os

import pytest

# Library chatter (torchao's optional kernels, transformers' progress bars) is not what tests check.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Snapshots must not catch a colour mid-transition.
os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
os.environ.setdefault("TOKENTOP_DATA", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "tokentop-data"))


@pytest.fixture(scope="session")
def engine_events():
    return []


@pytest.fixture(scope="session")
def engine(engine_events):
    """The real default model, loaded once for the whole session, in this process."""
    from tui_app.engine.generation import Engine, EngineConfig

    eng = Engine(EngineConfig(), engine_events.append)
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
    from tui_app.bench import apply_levers

    apply_levers(engine, {})
    yield engine
    apply_levers(engine, {})


class LlamaServer:
    """A real llama.cpp server process on 127.0.0.1 (tests/llama_server.py)."""

    def __init__(self, *options: str, env: dict | None = None):
        import subprocess
        import sys

        self.options = options
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.llama_server", *options],
            cwd=os.path.dirname(os.path.dirname(__file__)),
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
        import threading

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


@pytest.fixture(scope="session")
def llama_server():
    """The real llama.cpp server on the bundled GGUF, shared by the attach tests."""
    server = LlamaServer()
    yield server
    server.close()
