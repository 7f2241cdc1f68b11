import os

import pytest

from tests.llama_server import LlamaServer

# Library chatter (torchao's optional kernels, transformers' progress bars) is not what tests check.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Snapshots must not catch a colour mid-transition.
os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
# Forced, not defaulted: a user's own TOKENTOP_DATA is their real recordings folder, and tests
# (those that run the CLI in a subprocess inherit this) must never write there.
TEST_DATA = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "tokentop-data"))
os.environ["TOKENTOP_DATA"] = TEST_DATA


def pytest_collection_modifyitems(items):
    """Browser tests last: they start a server and a browser, and a failure there should not hide the rest."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


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


@pytest.fixture(scope="session")
def llama_server():
    """The real llama.cpp server on the bundled GGUF, shared by the attach tests."""
    server = LlamaServer()
    yield server
    server.close()
