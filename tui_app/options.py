"""Parsed command-line arguments turned into what the engine, the recorder and the runners take.

Below the CLI and every module it dispatches to, so those modules read their arguments through
here instead of importing the CLI back. Bad arguments raise UsageError; the CLI turns it into one
line and exit status EXIT_USAGE.
"""

from __future__ import annotations

import os

from monitors.events import Levers

EXIT_USAGE = 2


class UsageError(Exception):
    pass


def levers_from(args) -> Levers:
    return Levers(cache=not args.no_cache, compile=args.compile, quant=args.quant, spec=args.spec, batch=args.batch)


def engine_config(args):
    from tui_app.engine.config import EngineConfig

    if args.threads < 0:
        raise UsageError("--threads must be 0 (auto) or more")
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
        debug_leak_mb=args.debug_leak_mb,
    )


def run_request(args):
    from tui_app.engine.config import RunRequest
    from tui_app.engine.prompts import read_prompt_file

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
    if args.max_new_tokens <= 0:
        raise UsageError(f"--max-new-tokens must be at least 1 (got {args.max_new_tokens})")
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
    import time

    import platformdirs

    folder = os.environ.get("TOKENTOP_DATA") or platformdirs.user_data_dir("tokentop")
    return os.path.join(folder, "recordings", time.strftime("session-%Y%m%d-%H%M%S.jsonl"))


def make_recorder(args):
    """The session's recorder: --record FILE, else the user data folder; None with --no-record."""
    from monitors.record import Recorder

    return None if args.no_record else Recorder(args.record or default_record_path())
