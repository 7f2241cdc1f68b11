"""The CUDA path on a GPU (marked gpu: skipped, saying why, without one). Run there by
`make gpu-check` as `pytest -m gpu --device cuda` (docs/gpu.md); the same checks' judging logic is
tested on the CPU in test_gpu_check.py."""

import pytest

from benchmarks.gpu_check.checks import check_device_map, check_nvml_device, check_nvml_process
from benchmarks.gpu_check.memory import check_torch_memory
from benchmarks.gpu_check.models import Bench, check_device_leak, lever_check, random_llama, tokenizer_dir
from benchmarks.gpu_check.report import Check, run_check
from benchmarks.gpu_check.steps import check_syncs, check_timing
from tui_app.requests import RunRequest

pytestmark = pytest.mark.gpu

REQ = RunRequest(preset="short", max_new_tokens=16, ignore_eos=True)


@pytest.fixture(scope="module")
def cuda(device):
    return device if device.startswith("cuda") else "cuda"


@pytest.fixture(scope="module")
def default_arch(tmp_path_factory, cuda):
    """The default model's architecture and tokenizer, random weights, saved in bf16."""
    return random_llama(tmp_path_factory.mktemp("default-arch"), tokenizer_dir(None), cuda)


@pytest.fixture(scope="module")
def small_bench(default_arch, cuda):
    return Bench(default_arch, cuda, "bf16")


def passes(fn) -> Check:
    check = run_check("check", fn)
    assert check.status == "PASS", check.line()
    return check


def test_torch_memory_is_the_allocators(cuda):
    passes(lambda: check_torch_memory(cuda))


def test_nvml_sees_this_process_as_nvidia_smi_does(cuda):
    passes(lambda: check_nvml_process(cuda))


def test_nvml_device_memory_is_nvidia_smis(cuda):
    passes(lambda: check_nvml_device(cuda))


# compile: the GPU check's own sync check (its compile takes a minute of the run's budget).
@pytest.mark.parametrize("combo", [{}, {"spec": "lookup"}, {"batch": 4}], ids=["plain", "lookup", "b4"])
def test_at_most_one_cuda_sync_per_token(small_bench, combo):
    passes(lambda: check_syncs(small_bench, combo, REQ))


def test_ttft_and_itl_agree_with_cuda_events(small_bench):
    passes(lambda: check_timing(small_bench, REQ))


@pytest.mark.parametrize("combo", [{"cache": False}, {"spec": "draft"}, {"batch": 2}], ids=["no-cache", "draft", "b2"])
def test_a_lossless_lever_switched_mid_run_keeps_greedy_output(small_bench, combo):
    passes(lambda: lever_check(small_bench, combo, REQ))


@pytest.mark.parametrize("level", ["int8", "int4"])
def test_quantization_runs_on_cuda_in_bf16(small_bench, level):
    """torchao's int8 and tinygemm int4 (whose default packing would need the mslk package) load and decode."""
    passes(lambda: lever_check(small_bench, {"quant": level}, REQ))


def test_a_1_mb_per_run_device_leak_is_caught_within_20_runs(small_bench):
    check = passes(lambda: check_device_leak(small_bench, {}, REQ, 20, leak_mb=1.0))
    assert "torch allocated suspected" in check.figure, check.line()


def test_clean_runs_leave_the_device_baselines_flat(small_bench):
    passes(lambda: check_device_leak(small_bench, {}, REQ, 30))


def test_device_map_places_the_model_over_the_gpu_and_the_cpu(default_arch, cuda):
    """Half of its ~270 MB of weights allowed on the GPU: the rest on the CPU, the same greedy tokens."""
    check = passes(lambda: check_device_map(default_arch, cuda, {int(cuda.partition(":")[2] or 0): "150MiB", "cpu": "8GiB"}))
    assert " + cpu " in check.figure, check.line()
