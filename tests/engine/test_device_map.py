"""--device-map: the model placed by accelerate over devices, as for a model larger than one GPU.

Here, without a GPU, a small --max-memory for the CPU sends the rest of the real default model's
layers to disk: the same hooks that move activations between GPUs then move weights in from disk,
and the engine must give the same greedy text and perplexity as the model on one device, show where
the weights are, and refuse, with the reason, the levers that need the whole model on one device.
benchmarks/gpu_check runs the GPU + CPU split on a lent GPU (docs/gpu.md)."""

import argparse

import pytest

from monitors.events import LeverChanged, LeverRefused, RunFinished
from tests.commands.test_cli import tokentop
from tui_app.commands.options import max_memory
from tui_app.requests import RunRequest

REQ = RunRequest(max_new_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def placed():
    from tui_app.engine.generation import Engine, EngineConfig

    events: list = []
    eng = Engine(EngineConfig(device_map="auto", max_memory={"cpu": "200MiB"}), events.append)
    eng.load()
    return eng, events


def test_the_weights_are_placed_over_cpu_and_disk_and_every_byte_is_counted_once(placed):
    eng, _ = placed
    ready = eng.ready
    assert set(ready.placement) == {"cpu", "disk"} and eng.split
    assert sum(ready.placement.values()) == ready.weight_bytes  # tied embeddings once
    assert ready.placement["cpu"] <= 200 * 2**20 < ready.weight_bytes
    assert ready.n_params == 134_515_008  # SmolLM2-135M, as on one device: offloaded weights still count
    assert ready.device == "cpu"  # where the inputs and the sampling are


def test_a_split_model_gives_the_one_device_models_greedy_text_and_perplexity(placed, plain):
    eng, _ = placed
    assert eng.run(REQ).text == plain.run(REQ).text
    assert eng.perplexity("off") == pytest.approx(plain.perplexity("off"), rel=1e-5)


def test_levers_that_need_one_device_are_refused_with_the_reason_and_the_rest_work(placed):
    eng, events = placed
    events.clear()
    for lever, value in (("quant", "int8"), ("compile", True), ("spec", "draft")):
        eng.set_lever(lever, value)
    refused = [e for e in events if isinstance(e, LeverRefused)]
    assert [(e.lever, e.value) for e in refused] == [("quant", "int8"), ("compile", True), ("spec", "draft")]
    assert all(e.reason.startswith("the model is placed over several devices (--device-map)") for e in refused)
    events.clear()
    eng.request_probe()  # `m`: the in-place read would touch weights on disk
    assert [type(e) for e in events] == [LeverRefused] and events[0].lever == "probe"
    events.clear()
    try:
        assert eng.set_lever("spec", "lookup")
        fin = eng.run(RunRequest(preset="long", max_new_tokens=12, ignore_eos=True))
    finally:
        eng.set_lever("spec", "off")
    assert isinstance(fin, RunFinished) and fin.stop_reason == "max tokens"
    assert any(isinstance(e, LeverChanged) for e in events)
    eng.set_lever("batch", 2)
    try:
        assert eng.run(REQ).n_tokens == 12
    finally:
        eng.set_lever("batch", 1)


def test_headless_says_where_the_weights_are_and_why_a_lever_is_refused():
    args = ("run", "--no-tui", "--no-record", "--device-map", "auto", "--max-memory", "cpu=200MiB", "--max-new-tokens", "4")
    r = tokentop(*args)
    assert r.returncode == 0 and r.stderr == "", r.stderr  # accelerate's offload notice is library chatter
    assert r.stdout.startswith("SmolLM2-135M-Instruct on cpu 175.5 MiB + disk 337.6 MiB (float32,"), r.stdout
    r = tokentop(*args, "--quant", "int8")  # a lever asked for at start, as any refused one: one line, exit 2
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "tokentop: --quant int8 refused: the model is placed over several devices (--device-map); this lever needs the whole model on one device"
    ]


@pytest.mark.parametrize(
    "text,wanted",
    [("cuda:0=20GiB,cpu=64GiB", {0: "20GiB", "cpu": "64GiB"}), ("1=500MB", {1: "500MB"}), (" disk = 2GB ", {"disk": "2GB"})],
)
def test_max_memory_takes_accelerates_devices_and_sizes(text, wanted):
    assert max_memory(text) == wanted


@pytest.mark.parametrize(
    "text,needle", [("gpu=1GiB", "expected DEVICE=SIZE"), ("cpu=lots", "is not a size"), ("cpu", "expected DEVICE=SIZE"), (",", "expected DEVICE=SIZE")]
)
def test_a_bad_max_memory_is_one_line(text, needle):
    with pytest.raises(argparse.ArgumentTypeError, match=needle):
        max_memory(text)
    r = tokentop("run", "--no-tui", "--max-memory", text)
    assert r.returncode == 2 and needle in r.stderr.strip().splitlines()[-1]  # argparse's usage, then the one line
