"""benchmarks/gpu_check off the GPU: the report, the budget, the comparisons it judges by, and
the mid-run lever switch on a small random-weight Llama on the CPU (the half of each check that
needs no CUDA). The checks themselves run on a lent GPU (docs/gpu.md)."""

import re
import subprocess

import pytest
import torch

from benchmarks.gpu_check import LEVER_GROUPS, SWITCH_AT
from benchmarks.gpu_check.checks import check_bandwidth, check_device_map, check_observer_overhead, check_tui
from benchmarks.gpu_check.memory import check_cuda_snapshot
from benchmarks.gpu_check.models import Bench, check_device_leak, lever_check, random_llama, save_tokenizer, tokenizer_dir
from benchmarks.gpu_check.report import (
    Failed,
    Report,
    Skip,
    agree,
    first_difference,
    judge_greedy,
    lever_cases,
    near_tie_tolerance,
    parse_csv,
    pytest_summary,
    run_check,
)
from benchmarks.gpu_check.run import main, run_all
from benchmarks.gpu_check.steps import check_syncs, check_timing
from benchmarks.gpu_check.wheels import carry_tmux
from monitors.events import Levers
from tui_app.requests import RunRequest


def test_each_check_is_one_line_and_a_failure_never_stops_the_rest(tmp_path):
    lines = []
    report = Report(tmp_path / "r.md", ["head"], budget_s=60, echo=lambda line, flush: lines.append(line))

    def broken():
        raise ValueError("no\nluck")

    def failed():
        raise Failed("off by 3", "5 MiB", "2 MiB")

    def skipped():
        raise Skip("needs real weights")

    seen = []

    def running():
        seen.append((tmp_path / "r.md").read_text())  # the report while a check runs names it
        return "1 ms", "1 ms"

    for name, fn in [("a", broken), ("b", failed), ("c", skipped), ("d|e", running)]:
        report.check(name, fn)
    assert "| FAIL | d\\|e | - | - | did not finish: the run was stopped during this check |" in seen[0]
    assert [c.status for c in report.checks] == ["FAIL", "FAIL", "SKIP", "PASS"]
    assert lines[0] == "FAIL | a | - | - | ValueError: no luck"
    assert lines[1] == "FAIL | b | 5 MiB | 2 MiB | off by 3"
    assert lines[2] == "SKIP | c | - | - | needs real weights"
    text = (tmp_path / "r.md").read_text()
    assert "2 FAIL, 1 SKIP" in text.replace("1 PASS, ", "") and "| PASS | d\\|e | 1 ms | 1 ms | - |" in text


def test_checks_past_the_time_budget_say_skip_and_do_not_run(tmp_path):
    report = Report(tmp_path / "r.md", [], budget_s=0, echo=lambda *a, **k: None)
    ran = []
    report.check("late", lambda: ran.append(1))
    assert not ran and report.checks[0].status == "SKIP" and "--start-at 'late'" in report.checks[0].reason
    assert report.check("other", lambda: ran.append(1)) is not None
    only = Report(tmp_path / "o.md", [], budget_s=60, only="NVML", echo=lambda *a, **k: None)
    assert only.check("lever b2", lambda: ("", "")) is None and not only.checks
    several = Report(tmp_path / "s.md", [], budget_s=60, only="syncs|NVML device", echo=lambda *a, **k: None)
    ran = [several.check(name, lambda: ("", "")) for name in ("syncs per token: plain", "lever b2", "NVML device memory")]
    assert [c.status if c else None for c in ran] == ["PASS", None, "PASS"]
    resumed = Report(tmp_path / "s.md", [], budget_s=60, start_at="bandwidth", echo=lambda *a, **k: None)
    for name in ("lever b2 (bf16)", "bandwidth ~1B bf16 plain", "suite --device cuda"):
        resumed.check(name, lambda: ("", ""))
    assert [c.name for c in resumed.checks] == ["bandwidth ~1B bf16 plain", "suite --device cuda"]


def test_agree_passes_within_the_tolerance_and_fails_outside_it():
    assert agree(101.0, 100.0, 0.01, unit=" MiB") == ("101 MiB", "100 MiB")
    assert agree(103.0, 100.0, 0, 3) == ("103", "100")
    with pytest.raises(Failed, match=r"off by \+3.5 ms") as exc:
        agree(13.5, 10.0, 0.1, 2, " ms", "TTFT")
    assert (exc.value.figure, exc.value.reference) == ("13.5 ms", "10 ms")


def test_nvidia_smi_csv_is_read_row_by_row():
    text = "0, 1234, 81559\n1, [N/A], 81559\n\n"
    assert parse_csv(text) == [["0", "1234", "81559"], ["1", "[N/A]", "81559"]]


def test_every_lever_and_every_pair_of_levers_from_two_groups():
    cases = lever_cases()
    singles = sum(len(v) for v in LEVER_GROUPS.values())
    assert singles == 9 and len(cases) == 9 + 31
    group = {name: g for g, levers in LEVER_GROUPS.items() for name in levers}
    for name, combo in cases[singles:]:
        a, b = name.split("+")
        assert group[a] != group[b] and len(combo) == 2
        Levers(**combo)  # each a valid lever setting
    assert len({name for name, _ in cases}) == len(cases)


def test_greedy_outputs_are_judged_lossless_or_reported():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1 and first_difference([1, 2], [1, 2, 3]) == 2
    assert judge_greedy([1, 2, 3], [1, 2, 3], True)[0] == "same 3 tokens"
    assert "first differs at token 1" in judge_greedy([1, 2, 3], [1, 9, 3], False)[0]
    assert "near-tie" in judge_greedy([1, 2, 3], [1, 9, 3], True, lambda i: 0.001, 0.01)[0]
    with pytest.raises(Failed, match="differs from plain at token 1"):
        judge_greedy([1, 2, 3], [1, 9, 3], True, lambda i: 0.5, 0.01)
    with pytest.raises(Failed, match="2 tokens where plain gave 3"):
        judge_greedy([1, 2, 3], [1, 2], True)
    # A few ulps of the largest logit: bf16 rounds 8 times coarser than fp16.
    bf16, fp16 = (near_tie_tolerance(torch.finfo(t).eps, 10.0) for t in (torch.bfloat16, torch.float16))
    assert 0.1 < bf16 < 0.5 and 0.02 < fp16 < bf16 / 7


def test_pytest_summary_is_its_last_line():
    out = "....s\n==== 4 passed, 1 skipped in 3.2s ====\n"
    assert pytest_summary(out) == "4 passed, 1 skipped in 3.2s"
    assert pytest_summary("1 failed, 2 passed in 1.0s\n") == "1 failed, 2 passed in 1.0s"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_2(capsys, tmp_path):
    assert main(["--out", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no CUDA device here" in out
    assert not (tmp_path / "gpu-check.md").exists()


def test_the_carried_tokenizer_holds_no_weights(tmp_path):
    folder = save_tokenizer(tmp_path / "tok")
    names = {f.name for f in folder.iterdir()}
    assert {"tokenizer.json", "config.json"} <= names and not any(n.endswith(".safetensors") for n in names)
    assert sum(f.stat().st_size for f in folder.iterdir()) < 8 * 2**20


def test_the_carried_tmux_runs_from_its_own_folder_with_its_libraries(tmp_path):
    carry_tmux(tmp_path)
    assert {f.name for f in (tmp_path / "tmux").iterdir()} == {"tmux", "libevent_core-2.1.so.7", "libutempter.so.0"}
    # With the system's library folders out of reach of a plain lookup of these two, the wrapper still finds them.
    done = subprocess.run([str(tmp_path / "bin" / "tmux"), "-V"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.startswith("tmux "), done.stderr
    ldd = subprocess.run(["ldd", str(tmp_path / "tmux" / "tmux")], capture_output=True, text=True, env={"LD_LIBRARY_PATH": str(tmp_path / "tmux")}).stdout
    assert str(tmp_path / "tmux" / "libevent_core-2.1.so.7") in ldd


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory):
    """The default model's tokenizer on a small Llama of its config, random weights."""
    folder = tmp_path_factory.mktemp("small")
    overrides = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
    return random_llama(folder, tokenizer_dir(None), "cpu", overrides)


@pytest.fixture(scope="module")
def small_bench(small_folder):
    return Bench(small_folder, "cpu", "fp32")


@pytest.mark.parametrize(
    "combo", [{"spec": "lookup"}, {"batch": 2}, {"cache": False}, {"spec": "draft", "batch": 2}], ids=["lookup", "b2", "no-cache", "draft+b2"]
)
def test_a_lever_switched_mid_run_gives_plain_greedy_output(small_bench, combo):
    req = RunRequest(preset="short", max_new_tokens=12, ignore_eos=True)
    check = run_check("lever", lambda: lever_check(small_bench, combo, req))
    if "spec" in combo and "batch" in combo:  # speculation needs batch 1: the engine refuses, the check says why
        assert check.status == "SKIP" and "refused" in check.reason
    else:
        assert check.status == "PASS", check.line()
        assert check.figure == f"switched at step {SWITCH_AT}: same 12 tokens"
    assert small_bench.engine.levers == Levers()  # left plain for the next check


def test_the_logit_gap_is_read_from_the_plain_model(small_bench):
    req = RunRequest(preset="short", max_new_tokens=12, ignore_eos=True)
    plain = small_bench.plain(req)
    gap, scale = small_bench.logit_gap(req, plain, 3, plain[3])
    assert gap == 0 and scale > 0
    other = (plain[3] + 1) % 1000
    assert small_bench.logit_gap(req, plain, 3, other)[0] > 0  # greedy chose the largest logit


@pytest.mark.serial
def test_ttft_and_itl_agree_with_a_clock_of_their_own(small_bench):
    """The CPU half of the CUDA-events check: the same marks, on perf_counter."""
    req = RunRequest(preset="short", max_new_tokens=12, ignore_eos=True)
    check = run_check("timing", lambda: check_timing(small_bench, req))
    assert check.status == "PASS", check.line()
    assert check.reference.startswith("perf_counter: TTFT")


@pytest.mark.parametrize("combo, target", [({}, 1), ({"spec": "lookup"}, 1), ({"cache": False}, 2)], ids=["plain", "lookup", "no-cache"])
def test_host_reads_per_token_off_cuda(small_bench, combo, target):
    """Without a cache, transformers' packed-sequence check reads once more a step: the target says so."""
    req = RunRequest(preset="long", max_new_tokens=12, ignore_eos=True)
    check = run_check("syncs", lambda: check_syncs(small_bench, combo, req))
    assert check.status == "PASS", check.line()
    assert check.figure.endswith("host reads/token, no CUDA here") and float(check.figure.split()[0]) <= target
    assert check.reference.startswith(f"target ≤ {target}"), check.line()


def test_the_device_leak_check_runs_the_apps_detector_and_off_cuda_has_no_device_baseline(small_bench):
    """The CPU half: the runs, the lever and the debug leak set and put back; the device sources are
    CUDA's, so here the check fails naming them (test_cuda.py runs it on a GPU)."""
    req = RunRequest(preset="short", max_new_tokens=2, ignore_eos=True)
    check = run_check("leak", lambda: check_device_leak(small_bench, {"batch": 2}, req, 3, leak_mb=1.0))
    assert check.status == "FAIL" and check.reason == "no baseline from torch allocated, torch reserved, NVML process", check.line()
    assert small_bench.engine.levers == Levers() and small_bench.engine.cfg.demo_leak_mb == 0 and small_bench.engine._leak == []


def test_the_snapshot_check_gives_leakcheck_only_options_it_knows(small_folder):
    """The CPU half: the command line gets past tokentop's parser to the one refusal a CPU earns
    (a GPU session once lost this check to an option leakcheck does not take)."""
    check = run_check("snapshot", lambda: check_cuda_snapshot(small_folder, "cpu"))
    assert check.status == "FAIL" and "--cuda-snapshot records CUDA's allocator; this engine runs on cpu" in check.reason, check.line()


@pytest.mark.serial
def test_the_tui_check_drives_the_app_and_saves_its_screen(small_folder, tmp_path):
    """The CPU half: two runs with int8 switched on between them, the screen saved; without a GPU
    the panes have no GPU figures, and the check says so."""
    check = run_check("tui", lambda: check_tui(small_folder, "cpu", tmp_path, size=(120, 36)))
    assert check.status == "FAIL" and check.reason.startswith("the panes lack the GPU's figures"), check.line()
    util, memory = check.figure.split(" | ")  # the two panes' subtitles, as drawn
    assert util.startswith("engine ") and memory.startswith("engine ")
    svg = (tmp_path / "tokentop-gpu-120x36.svg").read_text()
    assert "int8" in svg and "</svg>" in svg


def test_the_observer_check_reads_the_benchmarks_table(small_folder, tmp_path):
    """The benchmark itself on the CPU (the TUI in tmux, the small model): its ratio and UI CPU read
    back into the row, judged against the targets."""
    report = Report(tmp_path / "r.md", [], budget_s=300, echo=lambda line, flush: None)
    check = run_check("observer", lambda: check_observer_overhead(report, small_folder, 240, device="cpu", quads=2, tokens=2000))
    said = check.line() + "\n" + "".join(text[-3000:] for text in report.logs.values())  # the benchmark's own words on a failure
    assert re.fullmatch(r"TUI ÷ alone [\d.]+ \([\d.]+–[\d.]+\), UI CPU [\d.]+ % of a core", check.figure), said
    assert check.status == "PASS" or check.reason == "outside the target", said  # speed is the benchmark's to say
    assert "observer overhead on cpu" in report.markdown()  # the benchmark's log beside the report


def test_the_device_map_check_places_the_model_over_two_devices_and_compares_greedy(small_folder):
    """The CPU half: the small model's weights offloaded to disk (the GPU and CPU on a lent GPU;
    the real default model over CPU and disk in test_device_map.py)."""
    check = run_check("device map", lambda: check_device_map(small_folder, "cpu", {"cpu": "8MiB"}, "fp32"))
    assert check.status == "PASS", check.line()
    assert re.fullmatch(r"disk 12.4 MiB: same 16 tokens, [\d.]+ tok/s \(16 steps\)", check.figure), check.figure
    assert re.fullmatch(r"plain greedy, 16 tokens on cpu alone, [\d.]+ tok/s", check.reference), check.reference
    refused = run_check("device map", lambda: check_device_map(small_folder, "cpu", {"cpu": "1GiB"}, "fp32"))
    assert refused.status == "FAIL" and refused.reason.startswith("not split: {'cpu': "), refused.line()


@pytest.mark.serial
def test_the_bandwidth_figure_is_weights_times_tokens_over_a_copy(small_folder):
    check = run_check("bandwidth", lambda: check_bandwidth(small_folder, "cpu", {}, "fp32", 16 * 2**20))
    assert check.status == "PASS", check.line()
    shape = r"([\d.]+) GB/s = ([\d.]+)% of the copy \(([\d.]+) tok/s × ([\d.]+) GB of weights\)"
    shape += r"; the app's mem bw ([\d.]+) of its in-place read \(([\d.]+) GB/s\)"
    achieved, share, tps, weights, live, read = (float(x) for x in re.fullmatch(shape, check.figure).groups())
    assert 0 < live <= 1.1 and read > 0  # the app's own figure, beside the check's
    peak = float(re.match(r"device-to-device copy ([\d.]+) GB/s", check.reference).group(1))
    assert achieved == pytest.approx(tps * weights, rel=1e-3) and share / 100 == pytest.approx(achieved / peak, rel=1e-2)


def test_only_runs_what_it_names_and_makes_the_model_it_needs(tmp_path):
    """The whole sequence as on a GPU, narrowed by --only: the lever model is made on first need, once."""
    lines = []
    report = Report(tmp_path / "r.md", [], budget_s=120, only="no-cache+b2", echo=lambda line, flush: lines.append(line))
    tiny = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}
    run_all(report, "cpu", tokenizer_dir(None), tmp_path, tiny)
    assert [c.name for c in report.checks] == ["lever no-cache+b2 (bf16)", "lever no-cache+b2 (fp16)"]
    assert all(c.status == "PASS" for c in report.checks), lines
    assert [h for h in report.header if h.startswith("model ")] == [report.header[0]] and "default-arch" in report.header[0]


SMALL_MOE = {"hidden_size": 64, "num_hidden_layers": 3, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}


def test_the_moe_check_counts_as_its_routers_chose_and_adds_no_read_off_cuda(tmp_path):
    """The CPU half of the MoE check: the random MoE made, the counts against the routers' own
    top-k, and the host reads with the counting on and off (no CUDA syncs to count here); smaller, in fp32."""
    from benchmarks.gpu_check.experts import check_moe_routing

    check = run_check("moe", lambda: check_moe_routing(tmp_path / "moe", tokenizer_dir(None), "cpu", SMALL_MOE, "fp32"))
    assert check.status == "PASS", check.line()
    assert check.figure.startswith("counts = recount over") and "CUDA syncs/token None vs None" in check.figure
