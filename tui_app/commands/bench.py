"""`tokentop bench`: lever combinations × prompt lengths × output lengths, with warmup and repeats.

Prompts of an exact token length are cut from the reference text (repeated as needed), without
the chat template, and every run generates exactly the asked number of tokens (EOS ignored),
so configurations compare like with like.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import dataclass, field

from monitors.events import EngineError, LeverRefused, Levers
from monitors.text import plural
from monitors.timing import Summary
from tui_app.commands.options import add_engine, check_engine
from tui_app.core import fmt
from tui_app.core.options import EXIT_USAGE, EngineOptions, bounded
from tui_app.core.tour import lever_settings
from tui_app.requests import Stop

LEVER_PRESETS = {
    "plain": {},
    "no-cache": {"cache": False},
    "compile": {"compile": True},
    "int8": {"quant": "int8"},
    "int4": {"quant": "int4"},
    "lookup": {"spec": "lookup"},
    "draft": {"spec": "draft"},
    "b2": {"batch": 2},
    "b4": {"batch": 4},
    "b8": {"batch": 8},
}


PARSER = {
    "help": "sweep levers x prompt lengths x output lengths; tables and files",
    "description": "Sweep the engine's levers × prompt lengths × output lengths, with warm-up runs and repeats; a Markdown "
    "table, and files with -o. A serving benchmark of running servers instead: tokentop bench --endpoint URL (its "
    "options: tokentop bench --endpoint URL --help).",
}


@dataclass(kw_only=True)
class SweepOptions:
    """The lengths a sweep measures, how often, and where its files go (the serving benchmark's too)."""

    lengths: str
    prompt_lengths: str | None
    new_tokens: int
    warmup: int
    repeats: int
    output: list[str]
    out: str


@dataclass(kw_only=True)
class Options(EngineOptions, SweepOptions):
    levers: str


def add_sweep(p: argparse.ArgumentParser) -> None:
    """SweepOptions."""
    g = p.add_argument_group("sweep")
    g.add_argument("--lengths", default="128:64,512:128,1024:256", help="prompt:new token pairs (default: the classic latency study)")
    g.add_argument(
        "--prompt-lengths",
        nargs="?",
        const="16,512",
        default=None,
        metavar="N,M",
        help="the short-vs-long prompt experiment: these prompt lengths, --new-tokens each, with ratios",
    )
    g.add_argument("--new-tokens", type=bounded(int, 1), default=64, help="new tokens for --prompt-lengths")
    g.add_argument("--warmup", type=bounded(int, 0), default=1, help="unmeasured runs before each row (default 1)")
    g.add_argument("--repeats", type=bounded(int, 1), default=3, help="measured runs per row (default 3)")
    g.add_argument("-o", "--output", choices=["json", "csv", "jsonl"], action="append", default=[], help="also write results in this format (repeatable)")
    g.add_argument("--out", default="tokentop-bench", help="file name stem for -o outputs (default tokentop-bench)")


def add_args(p: argparse.ArgumentParser) -> None:
    add_engine(p, generation=False)
    p.add_argument("--levers", default="plain,int8,lookup", help=f"comma-separated; join with + to combine. Known: {', '.join(LEVER_PRESETS)}")
    add_sweep(p)


def main(opts: Options) -> int:
    check_engine(opts.threads)
    return run_bench(opts)


def sweep_lengths(opts: SweepOptions) -> list[tuple[int, int]]:
    """(prompt, new) token pairs to measure; ValueError says which option is wrong."""
    if opts.prompt_lengths:
        lengths = [(int(n), opts.new_tokens) for n in opts.prompt_lengths.split(",")]
        if any(p <= 0 for p, _ in lengths) or opts.new_tokens <= 0:
            raise ValueError("--prompt-lengths and --new-tokens must be positive")
    else:
        lengths = parse_lengths(opts.lengths)
    if opts.repeats < 1 or opts.warmup < 0:
        raise ValueError("--repeats must be at least 1 and --warmup at least 0")
    return lengths


def outputs_writable(opts: SweepOptions) -> bool:
    """Checked before a sweep (a traceback after the whole sweep lost its files); False after saying why not."""
    if not opts.output:
        return True
    from pathlib import Path

    from tui_app.folders import FolderError, require

    try:
        require(Path(opts.out).expanduser().absolute().parent, "the bench outputs", "--out")
    except FolderError as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return False
    return True


def parse_levers(spec: str) -> list[tuple[str, dict]]:
    out = []
    for name in [s.strip() for s in spec.split(",") if s.strip()]:
        combo: dict = {}
        for part in name.split("+"):
            if part not in LEVER_PRESETS:
                raise ValueError(f"unknown lever preset {part!r}; known: {', '.join(LEVER_PRESETS)}")
            combo.update(LEVER_PRESETS[part])
        out.append((name, combo))
    return out


def parse_lengths(spec: str) -> list[tuple[int, int]]:
    out = []
    for pair in [s.strip() for s in spec.split(",") if s.strip()]:
        try:
            a, b = pair.split(":")
            p, n = int(a), int(b)
        except ValueError:
            raise ValueError(f"bad length pair {pair!r}: expected PROMPT:NEW, e.g. 128:64") from None
        if p <= 0 or n <= 0:
            raise ValueError(f"bad length pair {pair!r}: both must be at least 1")
        out.append((p, n))
    return out


@dataclass
class Result:
    levers: str
    prompt_tokens: int
    new_tokens: int
    repeats: int
    ttft: Summary | None = None
    itl: Summary | None = None
    tps: Summary | None = None
    e2e: Summary | None = None
    peak_rss: int = 0
    kv_bytes: int = 0
    accept_rate: float = math.nan
    perplexity: float | None = None
    diff_note: str = ""
    host_reads: float | None = None  # per token: each a device→host sync on a GPU
    cuda_syncs: float | None = None  # per token, as CUDA counts them
    refused: str = ""
    extra: dict = field(default_factory=dict)

    def flat(self) -> dict:
        d = {
            "levers": self.levers,
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "repeats": self.repeats,
            "refused": self.refused,
            "peak_rss": self.peak_rss,
            "kv_bytes": self.kv_bytes,
            "accept_rate": self.accept_rate,
            "perplexity": self.perplexity,
            "diff_note": self.diff_note,
            "host_reads_per_token": self.host_reads,
            "cuda_syncs_per_token": self.cuda_syncs,
        }
        for name in ("ttft", "itl", "tps", "e2e"):
            s = getattr(self, name)
            for k in ("mean", "std", "min", "max", "p50", "p95", "p99"):
                d[f"{name}_{k}"] = getattr(s, k) if s else None
        return d


def prompt_of_length(tok, n: int) -> list[int]:
    from tui_app.prompts import reference_text

    base = tok(reference_text())["input_ids"]
    return (base * (n // len(base) + 1))[:n]


def apply_levers(engine, combo: dict) -> str:
    """Set the engine's levers to exactly `combo`; the refusal reason, or ''."""
    refusals: list[str] = []
    listen = engine.emit

    def catch(ev):
        if isinstance(ev, LeverRefused):
            refusals.append(f"{ev.lever}: {ev.reason}")
        listen(ev)

    engine.emit = catch
    try:
        for name, value in lever_settings(Levers(**combo)):
            engine.set_lever(name, value)
    finally:
        engine.emit = listen
    return "; ".join(refusals)


def measure(engine, session, errors: list, name: str, combo: dict, prompt_len: int, new: int, warmup: int, repeats: int, progress) -> Result:
    from tui_app.requests import RunRequest

    res = Result(name, prompt_len, new, repeats)
    res.refused = apply_levers(engine, combo)
    if res.refused:
        return res
    ids = prompt_of_length(engine.tok, prompt_len)
    req = RunRequest(prompt_ids=ids, max_new_tokens=new, ignore_eos=True)
    ttft, itl, tps, e2e = [], [], [], []
    for i in range(warmup + repeats):
        fin = engine.run(req)
        progress()
        if fin is None:
            res.refused = errors[-1] if errors else "run failed"
            return res
        if i < warmup:
            continue
        stats = session.timer.runs[fin.run_id].total
        ttft.append(stats.ttft_s)
        itl.extend(stats.itl_s)
        tps.append(stats.decode_tps)
        e2e.append(stats.e2e_s)
        res.peak_rss = max(res.peak_rss, fin.peak_rss)
        res.kv_bytes = stats.kv_bytes
        res.accept_rate = stats.accept_rate
        res.perplexity = fin.perplexity
        res.diff_note = fin.diff_note
    res.ttft, res.itl, res.tps, res.e2e = Summary.of(ttft), Summary.of(itl), Summary.of(tps), Summary.of(e2e)
    res.host_reads, res.cuda_syncs = count_reads(engine, req)
    progress()
    return res


def count_reads(engine, req, steps: int = 16) -> tuple[float | None, float | None]:
    """Host reads (and on CUDA syncs) per token, from one more run of the same request stopped
    after `steps` steps: counting slows a run several times over, so it is never a timed one."""
    from monitors.host_reads import count_host_reads

    polls = [0]

    def poll():
        polls[0] += 1
        return [Stop()] if polls[0] > steps else []

    with count_host_reads(cuda=engine.device.startswith("cuda")) as n:
        fin = engine.run(req, poll)
    if fin is None or not fin.n_tokens:
        return None, None
    return n.per_token(fin.n_tokens)


def markdown(results: list[Result]) -> str:
    head = (
        "| levers | prompt→new | TTFT mean (p50/p95) | ITL mean (p50/p95/p99) | decode tok/s (min–max) | e2e s | peak RSS | KV "
        "| accept | host reads/token | ppl | vs plain greedy |"
    )
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in results:
        if r.refused:
            lines.append(f"| {r.levers} | {r.prompt_tokens}→{r.new_tokens} | refused: {r.refused} |" + " |" * 9)
            continue
        lines.append(
            f"| {r.levers} | {r.prompt_tokens}→{r.new_tokens} "
            f"| {fmt.ms(r.ttft.mean)} ({fmt.ms(r.ttft.p50)}/{fmt.ms(r.ttft.p95)}) "
            f"| {fmt.ms(r.itl.mean, 2)} ({fmt.ms(r.itl.p50, 2)}/{fmt.ms(r.itl.p95, 2)}/{fmt.ms(r.itl.p99, 2)}) "
            f"| {fmt.num(r.tps.mean)} ({fmt.num(r.tps.min)}–{fmt.num(r.tps.max)}) "
            f"| {fmt.num(r.e2e.mean, 2)} | {fmt.nbytes(r.peak_rss)} | {fmt.nbytes(r.kv_bytes)} "
            f"| {fmt.pct(r.accept_rate)} | {reads_cell(r)} | {fmt.num(r.perplexity, 2)} | {r.diff_note} |"
        )
    return "\n".join(lines)


def reads_cell(r: Result) -> str:
    if r.host_reads is None:
        return "–"
    return f"{r.host_reads:.2f}" + ("" if r.cuda_syncs is None else f" ({r.cuda_syncs:.2f} CUDA syncs)")


def environment(engine) -> dict:
    import importlib.metadata as md

    versions = {}
    for pkg in ("torch", "transformers", "torchao", "textual", "tokentop"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    r = engine.ready
    return {
        "model": r.model,
        "device": r.device,
        "placement": r.placement,
        "dtype": r.dtype,
        "threads": r.threads,
        "quant_impl": r.quant_impl,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "versions": versions,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run_bench(args: Options) -> int:
    from tui_app.commands.run import load_engine
    from tui_app.core.session import Session

    try:
        combos = parse_levers(args.levers)
        lengths = sweep_lengths(args)
    except ValueError as exc:
        print(f"tokentop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not outputs_writable(args):
        return EXIT_USAGE
    session = Session()
    errors: list[str] = []  # why a configuration failed
    session.listeners.append(lambda ev: errors.append(ev.message) if isinstance(ev, EngineError) else None)
    engine = load_engine(args, session)
    if engine is None:
        return EXIT_USAGE
    total = len(combos) * len(lengths) * (args.warmup + args.repeats + 1)  # + the counting run
    done = [0]
    t0 = time.time()

    def progress():
        done[0] += 1
        width = 30
        filled = width * done[0] // total
        eta = (time.time() - t0) / done[0] * (total - done[0])
        print(f"\r[{'█' * filled}{'·' * (width - filled)}] {done[0]}/{plural(total, 'run')}, ~{eta:.0f} s left ", end="", file=sys.stderr, flush=True)

    results = []
    for p_len, new in lengths:
        if p_len + new > engine.context_len:
            print(f"\ntokentop: {p_len}+{new} tokens exceed the model's context of {engine.context_len}; skipped", file=sys.stderr)
            continue
        for name, combo in combos:
            results.append(measure(engine, session, errors, name, combo, p_len, new, args.warmup, args.repeats, progress))
    print(file=sys.stderr)
    env = environment(engine)
    print(
        f"{env['model']} on {env['device']} ({env['dtype']}, {plural(env['threads'], 'thread')}), torch {env['versions']['torch']}, "
        f"{plural(args.warmup, 'warmup run')} + {plural(args.repeats, 'repeat')} per row\n"
    )
    print(markdown(results))
    if args.prompt_lengths and len(results) >= 2:
        print()
        print(prompt_length_ratios(results))
    return 0 if write_outputs(args, env, results) else 1


def prompt_length_ratios(results: list[Result]) -> str:
    """TTFT and decode ITL of each longer prompt ÷ the shortest, per lever setting."""
    lines = ["| levers | prompt tokens | TTFT | ×TTFT | ITL mean | ×ITL |", "|---|---|---|---|---|---|"]
    by_lever: dict[str, list[Result]] = {}
    for r in results:
        if not r.refused:
            by_lever.setdefault(r.levers, []).append(r)
    for name, rs in by_lever.items():
        rs.sort(key=lambda r: r.prompt_tokens)
        base = rs[0]
        for r in rs:
            lines.append(
                f"| {name} | {r.prompt_tokens} | {fmt.ms(r.ttft.mean)} | {r.ttft.mean / base.ttft.mean:.2f} "
                f"| {fmt.ms(r.itl.mean, 2)} | {r.itl.mean / base.itl.mean:.2f} |"
            )
    return "\n".join(lines)


def write_outputs(args: Options, env: dict, results: list[Result]) -> bool:
    """Each file asked for, whole; False, said in one line, where one cannot be written (the
    tables are on stdout already)."""
    from tui_app.core.options import csv_text, write_file

    settings = {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, type(None), list))}
    rows = [r.flat() for r in results]
    for kind in args.output:
        path = f"{args.out}.{kind}"
        if kind == "json":
            text = json.dumps(fmt.strict_json({"settings": settings, "environment": env, "results": rows}), indent=2, default=str, allow_nan=False)
        elif kind == "jsonl":
            text = "".join(json.dumps(fmt.strict_json({**row, "environment": env, "settings": settings}), default=str, allow_nan=False) + "\n" for row in rows)
        else:
            text = csv_text(rows, "levers")
        if not write_file(path, text):
            return False
    return True
