"""Workloads for `tokentop bench --endpoint`: what each round sends, and when.

- Synthetic (the default): prompts of an exact token length (the server's own tokenizer, see
  Prompts in attach/tokenizer.py), a fixed output length, closed loop or arrivals at --rate.
- `--dataset sharegpt FILE`: the ShareGPT conversation format (a JSON list, or JSON lines, of
  {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}). Each
  human turn is a prompt, its reply's token count the output length. Without --multi-turn the
  first turn of each conversation is sent; with it every turn, each carrying the conversation so
  far (the prompts sent before and the server's own replies), so a server's prefix cache hits.
- `--trace FILE`: the Mooncake trace format (JSON lines of timestamp in ms, input_length,
  output_length, hash_ids), sent at its own pace or --trace-speed times it. A hash id stands for
  one block of --trace-block tokens (512 in Mooncake's traces): requests that share leading hash
  ids share that prefix, token for token.

A malformed entry is refused with its line and field; a request longer than the server's context
is named, and refused or (--too-long skip) left out.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field, replace

from tui_app.attach.tokenizer import SALT
from tui_app.core.options import UsageError, bounded

HUMAN = ("human", "user")
ASSISTANT = ("gpt", "assistant", "chatgpt", "bard", "bing", "model")
FRESH, WARM = 1_000_003, 999_999_937  # hash-id offsets: a later round's blocks, the warm-up's
SAMPLES = {"sharegpt": "sample_sharegpt.json", "trace": "sample_trace.jsonl"}
SAMPLE_BLOCK = 16  # the shipped trace's tokens per hash id: its prompts stay short enough for a CPU


def trace_block(args) -> int:
    return args.trace_block or (SAMPLE_BLOCK if args.trace == "sample" else 512)


@dataclass
class Item:
    """One request of a round. A conversation's turns go in order, each once the one before has
    ended; its history (earlier prompts and the server's replies) goes before `text` when sent."""

    text: str | None  # None: made when sent, of `prompt_tokens` tokens (synthetic, trace)
    new_tokens: int
    at_s: float | None = None  # send time from the round's start; None: a closed loop's next free client
    prompt_tokens: int = 0  # as asked (a dataset's: counted by the server's tokenizer)
    conversation: int = -1
    turn: int = 0
    hash_ids: list[int] = field(default_factory=list)
    where: str = ""  # "line 12": where a file's request came from


@dataclass
class Workload:
    kind: str  # synthetic, sharegpt, trace
    items: list[Item]
    speed: float = 1.0
    block: int = 512
    skipped: list[str] = field(default_factory=list)  # too long for the server's context, and left out

    @property
    def label(self) -> str:
        return {"synthetic": "", "sharegpt": "sharegpt", "trace": f"trace ×{self.speed:g}"}[self.kind]

    @property
    def timed(self) -> bool:
        return self.kind == "trace"


def add_workload_args(g) -> None:
    g.add_argument(
        "--requests",
        type=bounded(int, 1),
        default=None,
        metavar="N",
        help="requests (a dataset's: conversations) a round (default: the concurrency; 10 at --rate; a file's all)",
    )
    g.add_argument(
        "--burstiness",
        type=_burstiness,
        default=1.0,
        help="--rate's arrivals: gamma-distributed gaps of this shape, as vllm bench serve's (1 Poisson, default; inf evenly spaced)",
    )
    g.add_argument(
        "--dataset", nargs=2, metavar=("FORMAT", "FILE"), default=None, help="prompts and output lengths from a file: sharegpt FILE ('sample': the shipped one)"
    )
    g.add_argument("--multi-turn", action="store_true", help="with --dataset: every turn of each conversation, each carrying the conversation so far")
    g.add_argument("--trace", default=None, metavar="FILE", help="replay a Mooncake JSONL trace at its own pace (FILE 'sample': the shipped one)")
    g.add_argument("--trace-speed", type=bounded(float, 0, lo_open=True), default=1.0, metavar="X", help="replay the trace X times as fast (default 1)")
    g.add_argument("--trace-block", type=bounded(int, 1), default=None, metavar="N", help="tokens per hash id (default 512, Mooncake's; the sample's 16)")
    g.add_argument("--output-len", type=bounded(int, 1), default=None, metavar="N", help="--dataset, --trace: every request's output length, not the file's")
    g.add_argument("--too-long", choices=["refuse", "skip"], default="refuse", help="a request over the server's context: refuse the run (default) or skip it")


def _burstiness(text: str) -> float:
    """A gamma shape more than 0, or inf (vllm bench serve's spelling of evenly spaced arrivals)."""
    import argparse

    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        return bounded(float, 0, lo_open=True)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or inf: evenly spaced)") from None


_burstiness.bounds = (float, 0, None, True)  # type: ignore[attr-defined]  # read by the bounds test


def sample_path(kind: str) -> str:
    """The shipped sample of a format, as a path (package data)."""
    from importlib.resources import files

    return str(files("tui_app") / "data" / "workloads" / SAMPLES[kind])


def _read(path: str, what: str, kind: str) -> str:
    from tui_app.prompts import read_prompt_file

    if path == "sample":
        path = sample_path(kind)
    try:
        return read_prompt_file(path)
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _entries(text: str, what: str) -> list[tuple[int, object]]:
    """(line, value) of each entry: a JSON list's elements, or one value per non-empty line."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        dec = json.JSONDecoder()
        out = []
        i = text.index("[") + 1
        while True:
            while i < len(text) and text[i] in " \t\r\n,":
                i += 1
            if i >= len(text):
                raise UsageError(f"{what}: line {_line_of(text, i)}: the JSON list is not closed with ]")
            if text[i] == "]":
                return out
            try:
                value, end = dec.raw_decode(text, i)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{what}: line {exc.lineno} column {exc.colno}: not JSON ({exc.msg})") from None
            out.append((_line_of(text, i), value))
            i = end
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise UsageError(f"{what}: line {n} column {exc.colno}: not JSON ({exc.msg})") from None
    return out


def read_sharegpt(path: str, multi_turn: bool) -> tuple[list[tuple[str, list[tuple[str, str]], str]], int]:
    """Each usable conversation as (where, [(human text, reply text)], system text), and how many
    had no human turn answered (left out, as vllm bench serve leaves them)."""
    what = f"--dataset sharegpt {path}"
    entries = _entries(_read(path, what, "sharegpt"), what)
    if not entries:
        raise UsageError(f"{what}: no conversations in it")
    out, unusable = [], 0
    for line, entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
            raise UsageError(f"{what}: line {line}: field 'conversations' is missing or not a list")
        system, pairs, pending = "", [], None
        for k, turn in enumerate(entry["conversations"]):
            if not isinstance(turn, dict) or not isinstance(turn.get("from"), str) or not isinstance(turn.get("value"), str):
                raise UsageError(f"{what}: line {line}: field 'conversations[{k}]' needs a text 'from' and a text 'value'")
            who = turn["from"].lower()
            if who == "system":
                system = turn["value"]
            elif who in HUMAN:
                pending = turn["value"]
            elif who in ASSISTANT:
                if pending is not None:
                    pairs.append((pending, turn["value"]))
                    pending = None
            else:
                raise UsageError(f"{what}: line {line}: field 'conversations[{k}].from' is {turn['from']!r}: expected human, gpt or system")
        pairs = [p for p in pairs if p[0].strip()]
        if not pairs:
            unusable += 1
            continue
        out.append((f"line {line}", pairs if multi_turn else pairs[:1], system))
    if not out:
        raise UsageError(f"{what}: no conversation has a human turn with a reply")
    return out, unusable


TRACE_FIELDS = {"timestamp": (int, float), "input_length": (int,), "output_length": (int,), "hash_ids": (list,)}


def read_trace(path: str, block: int) -> list[Item]:
    """The trace's requests in time order, at_s from its first timestamp (ms in the file)."""
    what = f"--trace {path}"
    items = []
    for line, entry in _entries(_read(path, what, "trace"), what):
        if not isinstance(entry, dict):
            raise UsageError(f"{what}: line {line}: expected an object with {', '.join(TRACE_FIELDS)}")
        for name, kinds in TRACE_FIELDS.items():
            value = entry.get(name)
            if value is None:
                raise UsageError(f"{what}: line {line}: field '{name}' is missing")
            if isinstance(value, bool) or not isinstance(value, kinds):
                expected = "a list of ids" if name == "hash_ids" else "a number"
                raise UsageError(f"{what}: line {line}: field '{name}' is {json.dumps(value)[:40]}: expected {expected}")
        ts, n_in, n_out, ids = entry["timestamp"], entry["input_length"], entry["output_length"], entry["hash_ids"]
        if not math.isfinite(ts) or ts < 0:
            raise UsageError(f"{what}: line {line}: field 'timestamp' is {ts}: expected milliseconds from 0")
        if n_in < 1 or n_out < 1:
            raise UsageError(f"{what}: line {line}: field '{'input_length' if n_in < 1 else 'output_length'}' must be at least 1")
        if not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids):
            raise UsageError(f"{what}: line {line}: field 'hash_ids' must hold whole numbers from 0")
        need = -(-n_in // block)
        if len(ids) != need:
            raise UsageError(
                f"{what}: line {line}: field 'hash_ids' has {len(ids)} ids, but input_length {n_in} is {need} block(s) of {block} tokens (--trace-block)"
            )
        items.append(Item(None, n_out, ts / 1000.0, n_in, hash_ids=list(ids), where=f"line {line}"))
    if not items:
        raise UsageError(f"{what}: no requests in it")
    items.sort(key=lambda it: it.at_s or 0.0)
    first = items[0].at_s or 0.0
    for it in items:
        it.at_s = (it.at_s or 0.0) - first
    return items


def arrivals(rate: float, burstiness: float, seed: int, count: int | None = None, duration: float | None = None) -> list[float]:
    """Send times (s from the round's start) at `rate` a second: gamma-distributed gaps of shape
    `burstiness` and mean 1/rate, vllm bench serve's definition (1: a Poisson process, inf: even)."""
    rng = random.Random(seed)
    times: list[float] = []
    t = 0.0
    while True:
        if math.isinf(burstiness):
            t += 1.0 / rate
        elif burstiness == 1:  # exponential gaps, drawn as such (the same seed gives the same schedule as ever)
            t += rng.expovariate(rate)
        else:
            t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        if (count is not None and len(times) >= count) or (duration is not None and t > duration):
            return times
        times.append(t)


def too_long(items: list[Item], n_ctx: int | None, policy: str, what: str) -> tuple[list[Item], list[str]]:
    """The items that fit the server's context, and a line for each left out; UsageError naming
    them (the first few) where the policy is to refuse."""
    if not n_ctx:
        return items, []
    over = [it for it in items if it.prompt_tokens + it.new_tokens > n_ctx]
    if not over:
        return items, []
    named = [f"{it.where or 'request'}{f' turn {it.turn + 1}' if it.turn else ''} ({it.prompt_tokens}+{it.new_tokens} tokens)" for it in over]
    if policy == "refuse":
        more = f" and {len(named) - 5} more" if len(named) > 5 else ""
        raise UsageError(
            f"{what}: {len(over)} request(s) exceed the server's context of {n_ctx} tokens: {'; '.join(named[:5])}{more}; --too-long skip leaves them out"
        )
    # A conversation's later turns carry a dropped turn's history: they go too.
    first_over = {}
    for it in over:
        first_over[it.conversation] = min(first_over.get(it.conversation, it.turn), it.turn)
    drop = {id(it) for it in over}
    kept = [it for it in items if id(it) not in drop and not (it.conversation >= 0 and it.turn > first_over.get(it.conversation, it.turn))]
    return kept, named


async def dataset_items(conversations: list, count_tokens, output_len: int | None, requests: int | None) -> list[Item]:
    """The dataset's requests: `count_tokens(text)` is the server's own count (or an estimate).
    A turn's prompt is counted with the conversation before it, as it is sent."""
    items = []
    for c, (where, pairs, system) in enumerate(conversations[:requests] if requests else conversations):
        history = await count_tokens(system) if system else 0
        for turn, (human, reply) in enumerate(pairs):
            n_prompt = await count_tokens(human)
            n_out = output_len or max(await count_tokens(reply), 1)
            items.append(Item(human if not system or turn else f"{system}\n\n{human}", n_out, None, history + n_prompt, c, turn, where=where))
            history += n_prompt + n_out
    return items


def block_ids(reference: list[int], hash_id: int, block: int) -> list[int]:
    """The tokens of hash id `hash_id`: a block of the reference text from an offset of its own
    (7919 is prime, so ids below the text's length start at different offsets)."""
    start = (hash_id * 7919) % len(reference)
    return [reference[(start + i) % len(reference)] for i in range(block)]


def trace_ids(item: Item, reference: list[int], block: int) -> list[int]:
    """The request's prompt tokens: its hash ids' blocks one after another, cut to input_length."""
    ids: list[int] = []
    for h in item.hash_ids:
        ids.extend(block_ids(reference, h, block))
    return ids[: item.prompt_tokens]


@dataclass
class CellPlan:
    """A cell as asked: what each round sends (every server the same), and at what load."""

    key: str  # the same across servers: "128:64", "sharegpt", "trace ×2"
    load: str  # "c4", "r2/s", "trace ×2"
    concurrency: int
    rate: float | None = None
    p_len: int = 0  # synthetic prompts
    new: int = 0
    workload: Workload | None = None  # a dataset's or a trace's requests


def plans(args, lengths: list[tuple[int, int]], concurrencies: list[int], workload: Workload | None) -> list[CellPlan]:
    if workload is not None and workload.timed:
        return [CellPlan(workload.label, workload.label, 1, workload=workload)]
    loads = [(f"r{args.rate:g}/s", 1, args.rate)] if args.rate is not None else [(f"c{c}", c, None) for c in concurrencies]
    if workload is not None:
        return [CellPlan(workload.label, load, conc, rate, workload=workload) for load, conc, rate in loads]
    return [CellPlan(f"{p}:{n}", load, conc, rate, p, n) for p, n in lengths for load, conc, rate in loads]


def round_size(args, plan: CellPlan) -> int | None:
    """Requests (or conversations) a round sends; None: as many as --duration's arrivals."""
    if plan.workload is not None:
        return None if plan.workload.timed else args.requests
    if plan.rate is not None:
        return args.requests or (None if args.duration else 10)
    return args.requests or plan.concurrency


async def round_items(args, plan: CellPlan, prompts, round_no: int, warm: int, fresh: int | None = None) -> tuple[list[Item], list[Item]]:
    """(warm-up, measured) requests of round `round_no` (its arrivals' seed) on one server, every
    text made (`prompts` is that server's Prompts: its tokenizer). Each round's texts are its own
    (`fresh`, default the round, numbers them), so no round finds an earlier one's prompt in the
    server's prefix cache."""
    size = round_size(args, plan)
    fresh = round_no if fresh is None else fresh
    w = plan.workload
    if w is None:
        times = arrivals(plan.rate, args.burstiness, args.seed_arrivals + round_no, size, args.duration) if plan.rate is not None else None
        n = len(times) if times is not None else size or 1
        texts = await prompts.make(plan.p_len, warm + n)
        items = [Item(t, plan.new, times[i] if times else None, plan.p_len) for i, t in enumerate(texts[warm:])]
        return [Item(t, plan.new, None, plan.p_len) for t in texts[:warm]], items
    if w.kind == "trace":
        ref = await prompts.reference_ids()
        # Fresh blocks each round (and for the warm-up), the same sharing within a round.
        items = [replace(it, at_s=(it.at_s or 0.0) / w.speed, hash_ids=[h + (SALT + fresh) * FRESH for h in it.hash_ids]) for it in w.items]
        warm_items = [replace(it, at_s=None, hash_ids=[h + WARM + SALT for h in it.hash_ids]) for it in w.items[:warm]]
        for it in [*warm_items, *items]:
            it.text = (await prompts.exact_text(trace_ids(it, ref, w.block), ref) if ref else None) or "word " * it.prompt_tokens
        return warm_items, items
    base = w.items if size is None else [it for it in w.items if it.conversation < size]
    tag = f"[{fresh}] " if fresh else ""
    items = [replace(it, text=tag + (it.text or "") if it.turn == 0 else it.text) for it in base]
    if plan.rate is not None:
        starts = arrivals(plan.rate, args.burstiness, args.seed_arrivals + round_no, count=len({it.conversation for it in items}))
        first = {c: starts[k] for k, c in enumerate(dict.fromkeys(it.conversation for it in items))}
        for it in items:
            it.at_s = first[it.conversation] if it.turn == 0 else 0.0
    spare = [it for it in w.items if it.turn == 0 and it.conversation >= (size or len(w.items))] or [it for it in w.items if it.turn == 0]
    warm_items = [replace(it, text="[warm-up] " + (it.text or ""), at_s=None, conversation=-1, turn=0) for it in spare[:warm]]
    return warm_items, items
