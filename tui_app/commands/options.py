"""The option groups the commands' parsers are built from, and the checks every command that runs
the engine in this process makes first. Each command's parser shows only its own groups."""

from __future__ import annotations

import argparse
import os
import sys

from monitors.events import BATCH_SIZES, QUANT_LEVELS, SPEC_MODES, THINK_BUDGETS
from tui_app.core.options import UsageError, bounded, demo_leak, require_extra
from tui_app.engine.config import BATCH_PROMPTS, DEVICE_MAPS
from tui_app.prompts import PRESETS

COUNT = bounded(int, 1)  # runs, tokens, layers: one or more
_FPS = bounded(float, 1, 60, why="redraws per second")


def FPS(text: str):
    """--fps: a number of redraws per second, or "auto" (4, lowered while the terminal falls behind)."""
    if text == "auto":
        return text
    try:
        return _FPS(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e} (or auto)") from None


FPS.bounds = _FPS.bounds  # type: ignore[attr-defined]
HZ = bounded(float, 0, 20, lo_open=True, why="samples per second; more would cost the machine what it measures")


def add_generation(p: argparse.ArgumentParser) -> None:
    """The prompt and the sampling (PromptOptions less its handling, and SamplingOptions)."""
    g = p.add_argument_group("generation")
    g.add_argument("--prompt", default=None, help="prompt text (default: the preset)")
    g.add_argument("--prompt-file", default=None, help="read the prompt from a file")
    g.add_argument("--preset", default=None, choices=PRESETS, help="prompt preset: short, long, story (the one prompt lookup favours) or file")
    g.add_argument("--max-new-tokens", type=COUNT, default=128)
    g.add_argument("--ignore-eos", action="store_true", help="always generate max-new-tokens")
    g.add_argument("--temperature", type=bounded(float, 0), default=0.0, help="0 = greedy (default)")
    g.add_argument(
        "--top-p", type=bounded(float, 0, 1, lo_open=True, why="the share of probability kept"), default=1.0, help="nucleus sampling, (0, 1] (default 1: off)"
    )
    g.add_argument("--seed", type=bounded(int, 0, 2**63 - 1), default=0)


def add_model(p: argparse.ArgumentParser) -> None:
    """ModelOptions."""
    g = p.add_argument_group("model")
    g.add_argument(
        "--model", default="default", help="'default' (bundled SmolLM2-135M-Instruct), a Hugging Face id in the local cache, a folder or a .gguf file"
    )
    g.add_argument("--device", default="auto", help="auto (cuda, then xpu, then mps, then cpu), cpu, cuda[:N], xpu[:N] or mps")
    g.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    g.add_argument(
        "--device-map",
        default=None,
        choices=DEVICE_MAPS,
        help="place the model's layers over every GPU, then CPU, then disk (accelerate), for a model larger than one GPU",
    )
    g.add_argument("--max-memory", type=max_memory, default=None, metavar="DEV=SIZE,...", help="with --device-map: each device's share, e.g. 0=20GiB,cpu=64GiB")
    g.add_argument("--draft-model", default=None, help="draft model for speculative decoding (default: the target's own first layers)")
    g.add_argument("--draft-layers", type=COUNT, default=4, help="layers of the self-draft (default 4)")
    g.add_argument("--threads", type=bounded(int, 0), default=0, help="torch threads on CPU (default 0: cores - 1, leaving one for the UI)")


def add_engine(p: argparse.ArgumentParser, generation: bool = True) -> None:
    """EngineOptions (and with `generation`, the prompt and its handling: PromptOptions)."""
    add_model(p)
    if generation:
        add_generation(p)
        g = p.add_argument_group("prompt handling")
        g.add_argument("--truncate", choices=["none", "left"], default="none", help="left: drop the start of a prompt too long for the context")
        g.add_argument("--no-chat", action="store_true", help="do not wrap the prompt in the model's chat template")
    else:
        g = p.add_argument_group("sampling")
        g.add_argument("--temperature", type=bounded(float, 0), default=0.0, help="0 = greedy (default)")
        g.add_argument(
            "--top-p",
            type=bounded(float, 0, 1, lo_open=True, why="the share of probability kept"),
            default=1.0,
            help="nucleus sampling, (0, 1] (default 1: off)",
        )
        g.add_argument("--seed", type=bounded(int, 0, 2**63 - 1), default=0)
    g = p.add_argument_group("levers (initial state; keys switch them live)")
    g.add_argument("--no-cache", action="store_true", help="start with the KV cache off")
    g.add_argument(
        "--compile", action="store_true", help="start with static cache + a compiled decode step (torch.compile; a quantized Llama on CPU: one C++ op)"
    )
    g.add_argument("--quant", choices=QUANT_LEVELS, default="off")
    g.add_argument("--spec", choices=SPEC_MODES, default="off")
    g.add_argument("--batch", type=int, choices=BATCH_SIZES, default=1)
    g.add_argument(
        "--think-budget",
        type=int,
        choices=THINK_BUDGETS,
        default=0,
        help="a reasoning model's thinking tokens at most, its close included (0: off; -1: no thinking; T switches it live; docs/reasoning.md)",
    )
    g.add_argument(
        "--batch-prompts",
        choices=BATCH_PROMPTS,
        default="distinct",
        help="what the batch lever batches: distinct prompts arriving during the run (continuous batching, default) or the run's own prompt replicated",
    )
    g.add_argument("--verbose", action="store_true", help="show the libraries' own warnings and progress bars")
    add_demo_leak(g)


def add_demo_leak(g) -> None:
    g.add_argument(
        "--demo-leak",
        type=demo_leak,
        default=(0.0, "tensor"),
        metavar="MB[:python|tensor]",
        help="for a demo of the leak view: keep MB a run on purpose, a tensor on the engine's device (default) or Python objects",
    )


def add_record(p: argparse.ArgumentParser) -> None:
    """RecordOptions."""
    p.add_argument("--record", default=None, help="record every event to this JSONL file (default: the user data folder)")
    p.add_argument("--no-record", action="store_true", help="do not record the session")


def add_ui(p: argparse.ArgumentParser) -> None:
    """UiOptions."""
    # 4 by measurement: at 8 the UI took 30 % of a core on the 2-core machine and slowed decode (README).
    p.add_argument(
        "--fps", type=FPS, default="auto", help="redraws per second, or auto (the default: 4, lower while the terminal cannot keep up, as over a slow link)"
    )
    p.add_argument("--ascii", action="store_true", help="charts, borders and marks in plain ASCII (terminals or fonts without braille or box drawing)")
    add_look(p)
    p.add_argument("--hz", type=HZ, default=4.0, help="system/GPU samples per second (default 4)")
    add_record(p)
    p.add_argument("--out-dir", default=None, help="folder for exports (e) and screenshots (ctrl+s) (default: the recordings folder)")
    p.add_argument("--auto", action="store_true", help="start in auto-repeat mode")


def add_look(p: argparse.ArgumentParser) -> None:
    p.add_argument("--theme", choices=("dark", "light"), default="dark", help="dark (the default) or light, for light terminals and rooms")
    p.add_argument("--present", action="store_true", help="start on the presenter's screen (P): big figures, thick charts, for a projector")


def check_engine(threads: int | None = None) -> None:
    """Before the engine starts: its extra installed (UsageError), its folders writable (FolderError),
    a fallback said; with `threads`, a warning where they outnumber the cores."""
    from tui_app.folders import check_engine_folders

    require_extra("engine")
    if threads is None:
        return
    for note in check_engine_folders():
        print(f"tokentop: {note}", file=sys.stderr)
    cores = os.cpu_count() or 1
    if threads > cores:
        print(f"tokentop: warning: --threads {threads} is more than this machine's {cores} cores; threads beyond them only wait", file=sys.stderr)


def check_models(args) -> None:
    """--model and --draft-model as their paths say, before any import of torch or load (UsageError):
    a typo is one line at once, not after seconds of imports or, for a draft, the main model's load."""
    from tui_app.engine.models import ModelError, locate

    try:
        for spec, option in ((args.model, "--model"), (args.draft_model, "--draft-model")):
            if spec is not None:
                locate(spec, option)
    except ModelError as exc:
        raise UsageError(str(exc)) from None


def max_memory(text: str) -> dict:
    """--max-memory: `DEVICE=SIZE,...` (cuda:0 or 0, cpu, disk; 20GiB, 500MB) as accelerate's
    max_memory, checked here so a typo is one line, not a traceback from the loader."""
    from accelerate.utils import convert_file_size_to_int

    limits: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        device, _, size = part.partition("=")
        device = device.strip().removeprefix("cuda:")
        if not size or not (device.isdigit() or device in ("cpu", "disk")):
            raise argparse.ArgumentTypeError(f"expected DEVICE=SIZE items such as cuda:0=20GiB,cpu=64GiB, got {part!r}")
        try:
            convert_file_size_to_int(size.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{size.strip()!r} is not a size such as 20GiB or 500MB") from None
        limits[int(device) if device.isdigit() else device] = size.strip()
    if not limits:
        raise argparse.ArgumentTypeError("expected DEVICE=SIZE items such as cuda:0=20GiB,cpu=64GiB")
    return limits
