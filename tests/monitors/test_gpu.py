import os
import shutil

import pytest

from monitors.gpu import NvmlReader
from monitors.sampler import Sampler, to_event
from tests.helpers.fake_nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FakeNVML,
)


def test_readings_of_every_device():
    nv = FakeNVML(n=2, procs={1: [(1234, 3 * 2**30), (999, 2**30)]})
    r = NvmlReader(nv).read({1234})
    assert r.available and len(r.gpus) == 2
    g0, g1 = r.gpus
    assert (g0.name, g0.sm_util, g0.mem_util, g0.mem_used, g0.mem_total) == ("NVIDIA Fake H100", 40.0, 20.0, 2**30, 80 * 2**30)
    assert g0.power_w == pytest.approx(250.0) and g0.temp_c == 55 and (g0.sm_clock_mhz, g0.mem_clock_mhz) == (1980, 2619)
    assert g0.proc_mem == 0 and g1.proc_mem == 3 * 2**30  # only our pids count


def test_used_memory_is_nvidia_smis_without_what_the_driver_reserves():
    """NVML's v1 memory query counts the driver's reserve as used (615 MiB more than nvidia-smi on an
    H200); v2 does not. A driver without v2 still gives v1's figure, with no reason: it is a reading."""
    nv = FakeNVML(n=1)
    g = NvmlReader(nv).read().gpus[0]
    assert g.mem_used == 2**30 and not g.reason
    old = FakeNVML(n=1, unsupported={"mem_v2"})
    g = NvmlReader(old).read().gpus[0]
    assert g.mem_used == 2**30 + old.reserved and not g.reason


def test_process_memory_sums_the_pids_over_every_device_and_says_none_when_nvml_cannot_tell():
    nv = FakeNVML(n=3, procs={0: [(1234, 5 * 2**20)], 2: [(1234, 7 * 2**20), (999, 2**30)]})
    reader = NvmlReader(nv)
    assert reader.process_memory({1234}) == 12 * 2**20
    nv.lost.add(2)  # a GPU lost since: the others still count
    assert reader.process_memory({1234}) == 5 * 2**20
    assert NvmlReader(FakeNVML(n=1, unsupported={"procs"})).process_memory({1234}) is None
    assert NvmlReader(FakeNVML(init_error=NVML_ERROR_DRIVER_NOT_LOADED)).process_memory({1234}) is None


@pytest.mark.parametrize(
    "code,needle",
    [
        (NVML_ERROR_LIBRARY_NOT_FOUND, "Library Not Found"),
        (NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
        (NVML_ERROR_LIB_RM_VERSION_MISMATCH, "version mismatch"),
    ],
)
def test_nvml_failing_at_init_is_na_with_the_reason(code, needle):
    reader = NvmlReader(FakeNVML(init_error=code))
    r = reader.read()
    assert not r.available and r.reason.startswith("n/a") and needle in r.reason


def test_nvml_module_missing_is_na():
    reader = NvmlReader(load=lambda: None)
    assert not reader.read().available and "not installed" in reader.reason


def test_no_devices_is_na():
    assert "no NVIDIA GPU" in NvmlReader(FakeNVML(n=0)).read().reason


def test_unsupported_query_leaves_the_others():
    r = NvmlReader(FakeNVML(n=1, unsupported={"power"})).read()
    g = r.gpus[0]
    assert g.power_w is None and "Not Supported" in g.reason and g.mem_used == 2**30


def test_gpu_lost_mid_session_stays_na_and_others_go_on():
    nv = FakeNVML(n=2)
    reader = NvmlReader(nv)
    assert reader.read().gpus[1].mem_used is not None
    nv.lost.add(1)
    r = reader.read()
    assert r.gpus[1].mem_used is None and "lost" in r.gpus[1].reason
    assert r.gpus[0].mem_used == 2**30
    calls = nv.calls
    nv.lost.discard(1)  # a lost GPU is not queried again (NVML calls on it can hang)
    r = reader.read()
    assert "lost" in r.gpus[1].reason
    assert nv.calls - calls == 10  # only GPU 0's ten queries (its GPM support was asked once, at its first reading)


def test_sampler_and_event_carry_the_reason_without_a_gpu():
    s = Sampler(gpu=NvmlReader(FakeNVML(init_error=NVML_ERROR_DRIVER_NOT_LOADED)))
    ev = to_event(s.sample_once())
    assert ev.gpu_sm is None and "Driver Not Loaded" in ev.gpu_reason
    s.stop()


def test_sampler_event_sums_gpu_memory():
    nv = FakeNVML(n=2)  # no process of ours on either: the box's figures
    s = Sampler(gpu=NvmlReader(nv))
    ev = to_event(s.sample_once())
    assert ev.gpu_mem_used == 3 * 2**30 and ev.gpu_proc_mem == 0 and ev.gpu_sm == pytest.approx(40.5)
    s.stop()
    assert nv.shutdown_called


@pytest.mark.parametrize("own", [0, 1])
def test_the_figures_follow_the_gpu_the_engine_is_on_and_the_others_keep_their_lines(own):
    """NVML's process list says which GPU holds the watched process's memory (here, this process):
    the busy %, memory and power are that GPU's, not the average of the box's two."""
    nv = FakeNVML(n=2, procs={own: [(os.getpid(), 5 * 2**20)]})
    s = Sampler(gpu=NvmlReader(nv))
    ev = to_event(s.sample_once())
    assert ev.gpu_sm == 40 + own and ev.gpu_mem_util == 20 + own  # FakeNVML's figures of that GPU
    assert ev.gpu_mem_used == (1 + own) * 2**30 and ev.gpu_power_w == pytest.approx((250_000 + own) / 1000)
    assert ev.gpu_proc_mem == 5 * 2**20 and [g["index"] for g in ev.gpus] == [0, 1]
    s.stop()


def test_energy_counter_gives_joules_per_token_over_the_tokens_seen_meanwhile():
    """NVML's energy counter (mJ, every GPU) ÷ the tokens generated between two samples; a GPU
    without the counter (before Volta) leaves it out with no reason of its own."""
    from monitors.events import Step
    from tui_app.core.session import Session

    nv = FakeNVML(n=2)
    sampler = Sampler(gpu=NvmlReader(nv))
    session = Session()
    session.feed(to_event(sampler.sample_once()))
    assert session.energy.joules_per_token() is None  # one reading
    zero = {"forward_ns": 0, "kv_bytes": 0, "kv_alloc_bytes": 0, "seq_len": 0}
    session.feed(Step(run_id=1, step=1, kind="decode", token_ids=[], text="x", n_tokens=50, t_ns=1, dt_ns=1, **zero))
    nv.energy_mj[0] += 30_000  # 30 J and 20 J while those 50 tokens were generated
    nv.energy_mj[1] += 20_000
    session.feed(to_event(sampler.sample_once()))
    assert session.energy.joules_per_token() == pytest.approx((30 + 20) / 50)
    sampler.stop()
    g = NvmlReader(FakeNVML(n=1, unsupported={"energy"})).read().gpus[0]
    assert g.energy_mj is None and g.reason == "" and g.power_w is not None


def test_gpm_and_clock_events_of_the_engines_gpu_reach_the_sample_and_its_runs_row():
    """GPM (Hopper and later; the second GPU, older, has none) over the interval between two
    readings, through NVML's real metrics struct; the clock events holding the clocks down, idle
    left out; the seconds a run spent so slowed, in its row."""
    from monitors.events import Levers, RunFinished, RunStarted
    from tui_app.core.session import Session

    nv = FakeNVML(n=2, procs={0: [(os.getpid(), 5 * 2**20)]}, gpm={0: {10: 81.0, 2: 40.0, 5: 12.5}})
    sampler = Sampler(gpu=NvmlReader(nv))
    first = to_event(sampler.sample_once())
    assert first.gpu_dram_pct is None and first.gpus[0]["dram_pct"] is None  # the first sample opens the interval
    session = Session()
    session.feed(first)
    session.feed(RunStarted(run_id=1, prompt_tokens=4, max_new_tokens=8, prompt_text="hi", levers=Levers(), t_ns=first.t_ns))
    nv.clock_events[0] = 0x1 | 0x4 | 0x40  # idle, power cap, HW thermal
    ev = to_event(sampler.sample_once())
    assert ev.gpu_dram_pct == 81.0 and ev.gpu_slowed == "power cap, HW thermal"
    g0, g1 = ev.gpus
    assert (g0["dram_pct"], g0["sm_active_pct"], g0["tensor_pct"]) == (81.0, 40.0, 12.5) and g1["dram_pct"] is None and g1["reason"] == ""
    session.feed(ev)
    nv.clock_events[0] = 0x1  # idle alone slows nothing
    late = to_event(sampler.sample_once())
    assert late.gpu_slowed == ""
    session.feed(late)
    none = dict.fromkeys(("peak_rss", "baseline_rss", "torch_peak", "gpu_baseline", "perplexity", "first_diff"))
    session.feed(RunFinished(run_id=1, n_tokens=0, stop_reason="max tokens", text="", diff_note="", t_ns=late.t_ns, **none))
    assert session.rows()[0].slowed_s == pytest.approx((ev.t_ns - first.t_ns) / 1e9)
    sampler.stop()
    assert nv.gpm_samples == {}, "the reader frees its GPM samples"


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="real NVML path: runs where an NVIDIA GPU is present")
def test_real_nvml_reads_every_gpu():
    import subprocess

    reader = NvmlReader()
    r = reader.read({os.getpid()})
    assert r.available, r.reason
    smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True)
    totals = [int(x) for x in smi.stdout.split()]
    assert [round(g.mem_total / 2**20) for g in r.gpus] == totals
    reader.close()
