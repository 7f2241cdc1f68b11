import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from tests.helpers import durations
from tests.helpers.llama_server import LlamaServer
from tests.helpers.vllm import AHEAD, SKIP, VLLM_PYTHON, Spec, VllmError, VllmServer, ahead, served

# Library chatter (torchao's optional kernels, transformers' progress bars) is not what tests check.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Snapshots must not catch a colour mid-transition.
os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
# The tests that stop a child with SIGINT, as Ctrl-C would, need the child to take it: a child
# inherits an ignored SIGINT, and a shell runs a command started with `&` so, as pytest-xdist's
# workers may be. A handler of Python's own is reset to the default in the child at its exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Forced, not defaulted: a user's own TOKENTOP_DATA is their real recordings folder, and tests
# (those that run the CLI in a subprocess inherit this) must never write there. Each pytest-xdist
# worker has its own folder and its own tmux server, so two workers' recordings and sessions never
# meet; the tmux server is private even inside a developer's tmux.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
TEST_DATA = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", f"tokentop-data-{WORKER}"))
os.environ["TOKENTOP_DATA"] = TEST_DATA
os.environ.pop("TMUX", None)
os.environ["TMUX_TMPDIR"] = os.path.join(tempfile.gettempdir(), f"tokentop-tests-tmux-{os.getpid()}")
os.makedirs(os.environ["TMUX_TMPDIR"], exist_ok=True)


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", help="where tests that take a device run the engine: cpu (default) or cuda[:N] (docs/gpu.md)")
    parser.addoption("--no-model", action="store_true", help="skip the tests that need the default model (make test-aarch64: the kernels alone, emulated)")


def pytest_configure(config):
    """Before the workers start: the default model's converted copy, made once (on a machine that
    has none, two workers converting it at once would each replace the folder the other reads)."""
    if getattr(config.option, "numprocesses", None) and "PYTEST_XDIST_WORKER" not in os.environ and not config.getoption("--no-model"):
        from tui_app.engine.models import ModelError, converted_default

        with contextlib.suppress(ModelError):  # no default model here: the tests that need it skip, saying why
            converted_default()


def pytest_unconfigure(config):
    """The process's tmux folder goes with it: each pytest process makes one, and a CI machine
    that kept them held 683 in /tmp after a day's runs. A tmux server a failed test left behind ends first."""
    if shutil.which("tmux"):
        subprocess.run(["tmux", "kill-server"], capture_output=True)
    shutil.rmtree(os.environ["TMUX_TMPDIR"], ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    """Where a `make test` run stands at each tier's end (docs/testing.md: the budget)."""
    start = os.environ.get("TOKENTOP_TEST_START")
    if start:
        terminalreporter.write_line(f"make test: {(time.time() - int(start)) / 60:.1f} min since it began")


def pytest_report_header(config):
    """Which body of tokentop's CPU kernels this run builds (engine/native.py), so a log says which path it tested."""
    try:
        from tui_app.engine import native
    except ImportError:  # the base install: no torch, no kernels
        return None
    return f"tokentop kernels: TOKENTOP_CPU_KERNELS={native.mode()}, the {native.isa()} body"


def pytest_collection_modifyitems(config, items):
    """The longest files first (tests/helpers/durations.py: on workers, no file starts after a
    longer one), and browser tests last: they start a server and a browser, and a failure there
    should not hide the rest. The agreement tests before all others: they keep a CPU each for a
    server and the tools, and no vLLM of the tier (vllm_ahead) is up beside them yet. GPU tests
    skip, saying why, where torch sees no CUDA device. Off the CPU, only the tests that take the
    device run: the rest would test here what a CPU run tests (and need the servers and the default
    model, which the lent GPU machine lacks: 8 % of the suite in 200 s there, 2026-11-28)."""
    seconds = durations.load()

    def marked(item, name):
        return item.get_closest_marker(name) is not None

    items.sort(key=lambda item: (not marked(item, "agreement"), marked(item, "browser"), -seconds.get(durations.file_of(item.nodeid), 0.0)))
    if config.getoption("--device") != "cpu":
        keep = [item for item in items if "device" in getattr(item, "fixturenames", ())]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep
    if os.environ.get("TOKENTOP_CPU_KERNELS", "").strip().lower() == "portable":
        from tui_app.engine import native

        if native.isa("best") == native.isa("portable"):
            # make test's second pass: here it would test the same build as the first.
            skip = pytest.mark.skip(reason=f"this CPU's best kernels are the portable ones ({native.isa()}): the first pass tested them")
            for item in items:
                if item.get_closest_marker("kernels") is not None:
                    item.add_marker(skip)
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu:
        import torch

        if not torch.cuda.is_available():
            skip = pytest.mark.skip(reason=f"needs a CUDA GPU: torch {torch.__version__} sees none")
            for item in gpu:
                item.add_marker(skip)


@pytest.fixture(scope="module", autouse=True)
def compiles_as_in_a_new_process():
    """dynamo keeps, for each function it compiles, which of its Python ints it has seen change,
    and compiles those as symbols from then on: the engine's step over a sliding-window cache,
    compiled in one test file, made the next file's first graph another one (Gemma's int4 +
    compile after Mistral's in the same worker: a miss in inductor's cache and a minute more of
    compiling, by which files the worker ran before it). Each file starts from what a new
    process knows; compiled code is kept (the shared engine's compiled steps)."""
    import sys

    pgo = sys.modules.get("torch._dynamo.pgo")
    if pgo is not None:
        pgo.reset_code_state()


@pytest.fixture(scope="session")
def device(request) -> str:
    return request.config.getoption("--device")


@pytest.fixture(scope="session")
def engine_events():
    return []


@pytest.fixture(scope="session")
def engine(request, engine_events, device):
    """The real default model, loaded once for the whole session, in this process, on --device."""
    if request.config.getoption("--no-model"):
        pytest.skip("--no-model: this run checks the kernels alone")
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


@ahead("vllm_url")
def default_vllm(folder):
    return Spec()


@pytest.fixture(scope="session")
def vllm_ahead(request, tmp_path_factory):
    """{fixture name: (VllmServer or the VllmError of its start, Spec)} for every server of AHEAD
    that the session's tests ask for, started together when the first of them is needed: a start
    is half a minute of one core importing (30 s of wall, 35 of CPU), and three at once answered
    within 64 s where one after another took 91 (the Zen 4 EPYC, 2026-11-30). Taken with `served`."""
    asked = {name for item in request.session.items for name in item.fixturenames}
    servers: dict = {}
    try:
        for name in sorted(AHEAD.keys() & asked):
            if not VLLM_PYTHON:
                servers[name] = (VllmError(SKIP), Spec())
                continue
            folder = tmp_path_factory.mktemp(name)
            spec = AHEAD[name](folder)
            try:
                servers[name] = (VllmServer(folder / "vllm.log", *spec.flags, env=spec.env, model=spec.model), spec)
            except VllmError as exc:
                servers[name] = (exc, spec)
        yield servers
    finally:
        for server, _ in servers.values():
            if isinstance(server, VllmServer):
                server.close()


@pytest.fixture(scope="session")
def vllm_url(vllm_ahead):
    """The real vLLM (its CPU build) on the default model's safetensors copy, shared by the vLLM tier."""
    return served(vllm_ahead, "vllm_url")[0]


@pytest.fixture(scope="session")
def llama_server():
    """The real llama.cpp server on the bundled GGUF, shared by the attach tests."""
    server = LlamaServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def second_llama():
    """A second real llama.cpp server: with llama_server, the fleet the Prometheus tests watch."""
    server = LlamaServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory, llama_server, second_llama):
    """One real Prometheus for the session (tests/helpers/prometheus.py), scraping both llama.cpp
    servers every second as job "llama"; tests add stand-in targets of other jobs and remove them."""
    from tests.helpers.prometheus import PrometheusServer, group, unavailable

    if unavailable():
        pytest.skip(unavailable())
    prom = PrometheusServer(str(tmp_path_factory.mktemp("prometheus")))
    prom.set_targets("llama", [group("llama", f"127.0.0.1:{s.port}") for s in (llama_server, second_llama)])
    prom.wait_up("llama", 2)
    prom.llama_up_at = time.time()  # the history a backfill can read begins about here
    yield prom
    prom.close()
