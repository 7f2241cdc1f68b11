"""The command line, as a user runs it: clear one-line errors with exit code 2, never a traceback."""

import json
import os
import re
import subprocess
import sys

import pytest

from monitors.record import read_recording
from tui_app.core.session import Session


def tokentop(*args, timeout=180, env=None):
    e = dict(os.environ, **(env or {}))
    r = subprocess.run([sys.executable, "-m", "tui_app", *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=e)
    assert "Traceback" not in r.stderr, r.stderr
    return r


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--batch", "3"], "invalid choice: 3"),
        (["--quant", "int2"], "invalid choice: 'int2'"),
        (["--temperature", "hot"], "expected a number"),
        (["run", "--no-tui", "--max-new-tokens", "0"], "argument --max-new-tokens: must be at least 1, got 0"),
        (["run", "--no-tui", "--prompt", "  "], "--prompt is empty"),
        (["run", "--no-tui", "--preset", "file"], "--preset file needs --prompt-file"),
        (["bench", "--lengths", "12x4"], "bad length pair"),
        (["bench", "--levers", "turbo"], "unknown lever preset 'turbo'"),
        (["leakcheck", "--runs", "5"], "use --runs 11 or more"),  # too few runs for a verdict: not a silent exit 0
        (["leakcheck", "--runs", "14", "--cuda-snapshot", "/nonexistent/dir/s.pickle"], "--cuda-snapshot /nonexistent/dir/s.pickle: cannot write it"),
        (["leakcheck", "--runs", "14", "--device", "cpu", "--cuda-snapshot", os.devnull], "--cuda-snapshot records CUDA's allocator; this engine runs on cpu"),
    ],
)
def test_command_line_misuse_exits_2_with_one_clear_line(args, needle):
    r = tokentop(*args)
    assert r.returncode == 2 and needle in r.stderr


def test_no_terminal_refuses_the_tui_and_points_to_headless():
    r = tokentop("--no-record")
    assert r.returncode == 2 and "no terminal" in r.stderr and "--no-tui" in r.stderr


def test_unknown_model_without_network(tmp_path):
    r = tokentop("run", "--no-tui", "--no-record", "--model", "someone/unknown-model")
    assert r.returncode == 2 and "not in the local Hugging Face cache" in r.stderr and "hf download" in r.stderr


def test_a_load_leaves_the_collector_on_even_when_it_fails():
    """A headless command loads with Python's collector off, as the engine's process does (1.7 s
    less of a start, docs/performance.md); the runs after it, and a failed load's caller, have it on."""
    code = "import gc, sys; from tui_app.cli import main; print(main(sys.argv[1:]), gc.isenabled())"
    args = ["run", "--no-tui", "--no-record", "--model", "someone/unknown-model"]
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert r.stdout.split() == ["2", "True"], r.stdout + r.stderr


def test_binary_prompt_file_and_unwritable_record_path(tmp_path):
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\x01\x02abc")
    r = tokentop("run", "--no-tui", "--no-record", "--prompt-file", str(binary))
    assert r.returncode == 2 and "looks binary" in r.stderr
    blocker = tmp_path / "f"
    blocker.write_text("")
    for argv in (["run"], ["demo"], ["attach", "http://127.0.0.1:9"], ["attach", "--prometheus", "http://127.0.0.1:9"]):  # each headless command alike
        r = tokentop(*argv, "--no-tui", "--record", str(blocker / "x.jsonl"))
        assert r.returncode == 2 and r.stderr.strip().startswith("tokentop: cannot write the recording") and "Traceback" not in r.stderr, argv


def test_prompt_longer_than_the_context_offers_truncation(tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("word " * 9000)
    r = tokentop("run", "--no-tui", "--no-record", "--prompt-file", str(big), "--max-new-tokens", "4")
    assert r.returncode == 2 and "context is 8192" in r.stderr and "--truncate left" in r.stderr


def test_headless_run_records_and_replay_gives_the_same_statistics(tmp_path):
    rec = tmp_path / "s.jsonl"
    odd = tmp_path / "odd.txt"
    odd.write_bytes("Résumé: naïve café — 東京 🚀 \xff\n".encode("utf-8", errors="surrogateescape") + b"\xff tail")
    r = tokentop("run", "--no-tui", "--record", str(rec), "--prompt-file", str(odd), "--max-new-tokens", "8", "--runs", "2", "--ignore-eos")
    assert r.returncode == 0, r.stderr
    live = [line for line in r.stdout.splitlines() if line.startswith("run ")]
    assert len(live) == 2 and all("TTFT" in line and "tok/s" in line and "KV" in line for line in live)
    got = read_recording(rec)
    assert got.error is None
    replayed = tokentop("replay", "--stats", str(rec))
    assert replayed.returncode == 0
    assert [line for line in replayed.stdout.splitlines() if line.startswith("run ")] == live
    # the same folding in-process, field by field
    rows = Session.from_events(got.events).rows()
    assert [row.stats.n_tokens for row in rows] == [8, 8]


def test_run_no_tui_json_prints_one_object_a_run_with_its_phases(tmp_path):
    """A model whose chat template opens a think span (tests/helpers/tiny_models.py): its seeded
    weights never close it, so every token is thinking and no answer came (TTFA null)."""
    from tests.helpers.tiny_models import save_thinker

    save_thinker(tmp_path / "m")
    r = tokentop("run", "--model", str(tmp_path / "m"), "--no-tui", "-o", "json", "--max-new-tokens", "6", "--runs", "2", "--ignore-eos")
    assert r.returncode == 0, r.stderr
    runs = [json.loads(line) for line in r.stdout.splitlines()]  # stdout is JSON alone; the model's line on stderr
    assert [run["run"] for run in runs] == ["1", "2"] and "params" in r.stderr
    for run in runs:
        assert (run["thinking_tokens"], run["answer_tokens"], run["tool_tokens"], run["new_tokens"]) == (6, 0, 0, 6)
        assert run["ttfa_s"] is None and run["ttft_s"] > 0 and run["thinking_share"] == 1.0 and run["text"]


def test_run_no_tui_on_an_moe_gives_each_layers_expert_counts_and_its_imbalance(tmp_path):
    """A small Qwen3-MoE (tests/helpers/tiny_models.py): `-o json` carries the counts, each layer's
    summing to the positions forwarded × 2 a token; the human line and its replay say the load."""
    from monitors.routing import load_text
    from tests.helpers.tiny_models import K, save_moe

    save_moe("qwen3moe", tmp_path / "m")
    rec = tmp_path / "moe.jsonl"
    r = tokentop("run", "--model", str(tmp_path / "m"), "--no-tui", "-o", "json", "--max-new-tokens", "5", "--ignore-eos", "--record", str(rec))
    assert r.returncode == 0, r.stderr
    (run,) = [json.loads(line) for line in r.stdout.splitlines()]
    positions = run["prompt_tokens"] + run["new_tokens"] - 1
    assert len(run["expert_counts"]) == 3 and all(sum(layer) == positions * K for layer in run["expert_counts"])
    replayed = tokentop("replay", "--stats", str(rec))
    assert replayed.returncode == 0, replayed.stderr
    assert load_text(run["expert_counts"]) in replayed.stdout and "experts max/mean" in replayed.stdout
    # four distinct prompts at a time: each step reads the union of its rows' experts, and the read rate weighs it
    batch = tokentop("run", "--model", str(tmp_path / "m"), "--no-tui", "--max-new-tokens", "8", "--ignore-eos", "--batch", "4", "--no-record")
    assert batch.returncode == 0, batch.stderr
    mean = float(re.search(r"weighing the experts each step read \(a mean of ([\d.]+) of 3×8; one token's: 3×2\)", batch.stdout).group(1))
    assert 6 < mean <= 24


def test_replay_of_something_that_is_not_a_recording(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text("hello\n")
    r = tokentop("replay", "--stats", str(f))
    assert r.returncode == 2 and "line 1" in r.stderr and "not a tokentop recording" in r.stderr


def test_bench_end_to_end_writes_table_and_files(tmp_path):
    import json

    out = tmp_path / "b"
    r = tokentop(
        "bench",
        "--lengths",
        "8:4",
        "--levers",
        "plain,int8,lookup+b2",
        "--repeats",
        "2",
        "--warmup",
        "0",
        "-o",
        "json",
        "-o",
        "csv",
        "--out",
        str(out),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    table = [line for line in r.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + 3
    assert "refused" in table[-1] and "batch size 1" in table[-1]  # lookup needs batch 1
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["environment"]["versions"]["torch"] and data["environment"]["device"] == "cpu"
    plain = data["results"][0]
    assert plain["levers"] == "plain" and plain["repeats"] == 2 and plain["ttft_p50"] > 0 and plain["tps_mean"] > 0
    # One read of the new token per step (tests/test_host_reads.py checks the counter itself).
    assert plain["host_reads_per_token"] == 1 and data["results"][1]["host_reads_per_token"] == 1
    assert plain["cuda_syncs_per_token"] is None and "| 1.00 |" in table[1]
    assert (tmp_path / "b.csv").read_text().startswith("levers,")


def test_leakcheck_exits_1_on_a_leak_and_0_without(tmp_path):
    leaky = tokentop("leakcheck", "--runs", "14", "--max-new-tokens", "2", "--demo-leak", "1")  # docs/leaks.md
    assert leaky.returncode == 1, leaky.stdout + leaky.stderr
    assert "suspected" in leaky.stdout and "MiB" in leaky.stdout and "┤" in leaky.stdout  # verdict and the plot
    clean = tokentop("leakcheck", "--runs", "14", "--max-new-tokens", "2")
    assert clean.returncode == 0 and "leak: none" in clean.stdout and "where" not in clean.stdout, clean.stdout


def _demo_leak_line(kind: str) -> str:
    """engine/memory.py's own line that keeps `kind`'s memory, found in its source (not a number kept here)."""
    import inspect

    from tui_app.engine import memory

    lines, first = inspect.getsourcelines(memory.demo_leak)
    mark = "bytearray(1024)" if kind == "python" else "torch.ones("
    return f"{memory.__file__}:{first + next(i for i, line in enumerate(lines) if mark in line)}"


@pytest.mark.parametrize("kind,heap", [("tensor", "torch"), ("python", "python")])
def test_leakcheck_names_the_line_that_keeps_the_memory_and_its_mb_a_run(kind, heap):
    """--demo-leak 1:KIND keeps 1 MB a run on purpose; leakcheck's JSON names that line first, at
    about 1 MB a run (a KiB bytearray is two blocks: 1025 bytes and its 56-byte object, and the list keeps 8 bytes for it), in the heap it lives in."""
    r = tokentop("leakcheck", "--runs", "14", "--max-new-tokens", "2", "--demo-leak", f"1:{kind}", "-o", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["suspected"] and out["verdicts"]["engine RSS"]["status"] == "suspected"
    top = out["sites"][0]
    assert f"{top['file']}:{top['line']}" == _demo_leak_line(kind) and top["heap"] == heap, out["sites"]
    assert 1.0 <= top["mb_per_run"] <= 1.07 and (top["blocks_per_run"] == 1 if kind == "tensor" else top["blocks_per_run"] >= 1024)
    # The verdict's 14 runs untraced, then three traced runs after it name the line.
    assert out["sites_runs"] == [15, 17] and len(out["baselines_mib"]["engine RSS"]) == 14
    if kind == "tensor":  # gc counts containers and instances, a tensor among them (not bytearrays)
        assert 1 <= {t["type"]: t["per_run"] for t in out["object_types"]}["torch.Tensor"] <= 1.5, out["object_types"]


def test_serve_binds_to_localhost_and_serves_the_page():
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tui_app", "serve", "--port", str(port), "--no-record"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        page = None
        for _ in range(100):
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read().decode()
                break
            except OSError:
                import time

                time.sleep(0.2)
        assert page and "tokentop" in page
        conns = [c for c in __import__("psutil").Process(proc.pid).net_connections() if c.status == "LISTEN"]
        assert conns and all(c.laddr.ip == "127.0.0.1" for c in conns)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(
    "levers,needle",
    [
        (["--compile", "--spec", "lookup"], "--spec lookup refused: verify steps are multi-token"),
        (["--compile", "--no-cache"], "--no-cache refused: compile runs on a static KV cache"),
        (["--spec", "draft", "--batch", "2"], "--batch 2 refused: speculative decoding verifies one sequence"),
    ],
)
def test_headless_refuses_a_lever_it_cannot_apply_instead_of_dropping_it(levers, needle):
    """Numbers labelled without the lever asked for would answer another question: exit 2, no numbers."""
    r = tokentop("run", "--no-tui", "--no-record", "--max-new-tokens", "2", *levers)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert " tok/s" not in r.stdout


def _numeric_options():
    """(command line before the option, option, parse type) for every option that takes a number, in every subcommand."""
    from tui_app.cli import build_parser, serving_bench_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
    parsers = [([name], p) for name, p in sub.choices.items()] + [(["bench", "--endpoint", "http://127.0.0.1:9"], serving_bench_parser())]
    for before, p in parsers:
        for action in p._actions:
            numeric = isinstance(action.default, (int, float)) and not isinstance(action.default, bool)
            bounded = hasattr(action.type, "bounds")  # those whose default is None (--rate) say so by their type
            if action.option_strings and (numeric or bounded) and not action.choices:
                yield before, action.option_strings[-1], action.type


def test_every_numeric_option_has_bounds_and_refuses_each_side_with_the_range(capsys):
    """--top-p 1.5, --threads -3, --port 0, --speed -1, --fps 0, --repeats 0: each refused by its own
    name, with its range, before anything runs."""
    from tui_app.cli import main

    options = list(_numeric_options())
    assert len(options) >= 15
    for before, opt, typ in options:
        cmd = before[0]
        assert hasattr(typ, "bounds"), f"{cmd} {opt} takes any number"
        kind, lo, hi, lo_open = typ.bounds
        step = 1 if kind is int else 0.5
        bad = ([lo if lo_open else lo - step] if lo is not None else []) + ([hi + step] if hi is not None else [])
        for value in bad:
            capsys.readouterr()
            with pytest.raises(SystemExit) as done:
                main([*before, opt, str(kind(value)), *(["x.jsonl"] if cmd in ("replay", "report") else [])])
            err = capsys.readouterr().err
            assert done.value.code == 2 and f"argument {opt}: must be" in err and str(kind(value)) in err, (cmd, opt, value, err)


def test_the_top_level_help_says_where_the_default_commands_options_are(capsys):
    """`tokentop --help` lists the commands; the options of the default one (`--present` in the
    README) are run's, and the help says so, naming only options that run has."""
    import re

    from tui_app.cli import build_parser, main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "tokentop run --help" in out and "-- python my_script.py" in out
    named = set(re.findall(r"--[a-z][a-z-]+", out.split("Without a command")[1]))
    sub = next(a for a in build_parser()._actions if a.choices and isinstance(a.choices, dict))
    run_options = {o for a in sub.choices["run"]._actions for o in a.option_strings}
    assert "--present" in named and named - {"--help"} <= run_options, named - run_options


def test_top_p_and_threads_ranges_give_reasons():
    r = tokentop("run", "--no-tui", "--top-p", "0")
    assert r.returncode == 2 and "--top-p: must be in (0, 1], got 0" in r.stderr
    cores = os.cpu_count() or 1
    r = tokentop("bench", "--threads", str(cores + 3), "--lengths", "12x4")  # a bad length stops it before a model loads
    assert f"--threads {cores + 3} is more than this machine's {cores} cores" in r.stderr and "bad length pair" in r.stderr


def test_serve_beyond_this_machine_needs_public_and_says_who_can_connect():
    import socket
    import time

    r = tokentop("serve", "--host", "0.0.0.0")
    assert r.returncode == 2 and "--public" in r.stderr and "ssh -L 8000:127.0.0.1:8000" in r.stderr
    assert tokentop("serve", "--host", "localhost", "--port", "0").returncode == 2  # the port's range, before anything binds
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tui_app", "serve", "--host", "0.0.0.0", "--public", "--port", str(port), "--no-record"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(100):
            if any(c.status == "LISTEN" for c in __import__("psutil").Process(proc.pid).net_connections()):
                break
            time.sleep(0.2)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert f"anyone who can reach port {port} on every address of this machine" in err and "127.0.0.1" in err
    assert "--public" not in err.split("command:")[-1]  # not passed on to `run`, which has no such option


def test_model_errors_name_the_option_and_the_kind_of_path_before_torch_is_imported(tmp_path):
    """What a path alone says is said at once: in the TUI's command and the headless ones alike, a
    draft's typo before the main model loads, and no command imports torch to say it."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    cases = {
        f"run --no-tui --no-record --model {notes}": f"--model {notes}: a file that is not a .gguf; give a model folder",
        f"run --no-record --model {tmp_path}": f"--model {tmp_path}: this folder is not a model (no config.json)",
        f"run --no-tui --no-record --draft-model {tmp_path}/missing.gguf": f"--draft-model {tmp_path}/missing.gguf: no such file",
        f"bench --draft-model {tmp_path}/missing.gguf": f"--draft-model {tmp_path}/missing.gguf: no such file",
        f"leakcheck --model {tmp_path}/nope": f"--model {tmp_path}/nope: no such file or folder",
        f"demo --no-tui --model {notes}": f"--model {notes}: a file that is not a .gguf",
    }
    code = "import sys; from tui_app.cli import main; [print(main(a.split()), 'torch' in sys.modules, flush=True) for a in sys.argv[1:]]"
    r = subprocess.run([sys.executable, "-c", code, *cases], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.stdout.split("\n")[:-1] == ["2 False"] * len(cases), r.stdout + r.stderr
    lines = r.stderr.splitlines()  # one line each
    assert len(lines) == len(cases) and all(line.startswith(f"tokentop: {m}") for line, m in zip(lines, cases.values(), strict=True)), r.stderr


def test_headless_output_has_no_library_noise_unless_verbose():
    """Not torchao's optional kernels, torch's pytree deprecations or the weight-loading bar: the numbers alone."""
    r = tokentop("run", "--no-tui", "--no-record", "--quant", "int8", "--max-new-tokens", "2")
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr
    loud = tokentop("run", "--no-tui", "--no-record", "--quant", "int8", "--max-new-tokens", "2", "--verbose", env={"TRANSFORMERS_VERBOSITY": "info"})
    assert loud.returncode == 0 and loud.stderr.strip() != ""


def test_a_leakcheck_whose_run_fails_says_why_and_leaves_nothing_traced(capsys):
    """In this process, as a notebook or a CI script would call it: a failed run ends the check
    with the engine's reason, and tracemalloc and the torch marker are off again."""
    import tracemalloc

    import torch

    from tui_app import cli

    module, opts = cli.parse(["leakcheck", "--runs", "14", "--max-new-tokens", "100000"])
    assert module.leakcheck(opts) == 2
    assert "tokentop: run 1 failed: max new tokens 100000 does not fit the model's context" in capsys.readouterr().err
    assert not tracemalloc.is_tracing() and torch.overrides._get_current_function_mode_stack() == []


def test_the_anatomy_guides_command_prints_where_a_step_goes_and_writes_the_trace(tmp_path):
    """docs/anatomy.md's command as the page gives it: the table of parts and the trace's path."""
    import re
    import shlex
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "anatomy.md").read_text()
    (cmd,) = re.findall(r"```sh\n(tokentop run [^\n]*)\n```", page)
    r = tokentop(*shlex.split(cmd)[1:], "--no-record", "--out-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.startswith("anatomy of run 1: 8 decode steps (cache)") for line in lines), r.stdout
    for label in ("embedding", "attention", "MLP", "norms", "LM head", "sampling", "framework"):
        assert any(line.strip().startswith(label) for line in lines), (label, r.stdout)
    (trace,) = tmp_path.glob("tokentop-*-trace.json")
    assert f"trace: {trace}" in r.stdout and json.loads(trace.read_text())["traceEvents"]
