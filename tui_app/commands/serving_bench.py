"""`tokentop bench --endpoint URL [--endpoint URL2]`: a serving benchmark of running servers.

Cells: prompt length × output length × load, where load is a number of concurrent clients (closed
loop: each sends its next request when the last one ends) or, with --rate, Poisson arrivals at R
requests/s (open loop: requests start on schedule whatever the server's state, as real traffic
does); or a dataset's or a trace's requests (tui_app/commands/workloads.py). Each cell runs
--repeats rounds, the servers taking turns round by round (tui_app/commands/serving_run.py), and
each figure has its interval over the rounds (cell_stats.py). Every request goes through the attach client, so TTFT and ITL have the attach definitions
(ITL per token, a multi-token chunk spread over its tokens); TPOT is (e2e − TTFT) ÷ (tokens − 1)
per request, as `vllm bench serve` computes it. The server's own figures come from its /metrics
over the cell's window. Goodput: requests per second that met every SLO given with --slo.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from monitors.timing import Summary
from tui_app.core import fmt
from tui_app.core.options import UsageError, bounded, csv_text, write_file

SLO_KEYS = ("ttft", "itl", "tpot", "e2e")
XRAY_COLUMNS = ("server_queue", "server_prefill", "server_decode", "overhead_ttft", "overhead_e2e")
STATS = ("mean", "std", "p50", "p90", "p95", "p99")


def add_endpoint_args(p) -> None:
    g = p.add_argument_group("serving benchmark (with --endpoint)")
    g.add_argument("--endpoint", action="append", default=[], metavar="URL", help="a running server to benchmark instead of the engine (repeatable)")
    g.add_argument("--label", action="append", default=[], help="a name per --endpoint (default host:port)")
    g.add_argument("--concurrency", default="1", help="closed loop: comma-separated numbers of concurrent clients (default 1)")
    g.add_argument("--rate", type=bounded(float, 0, lo_open=True), default=None, help="open loop: Poisson arrivals at this many requests/s instead")
    g.add_argument("--duration", type=bounded(float, 0, lo_open=True), default=None, help="open loop: seconds of arrivals per round (default: 10 requests)")
    g.add_argument("--slo", default="", help="e.g. ttft=500ms,itl=50ms (also tpot, e2e; ms or s): goodput counts requests meeting all")
    g.add_argument("--prompts", default=None, metavar="FILE", help="prompts to cycle through: JSONL with a 'prompt' field, or one per line")
    g.add_argument("--shared-prefix", type=bounded(int, 0), default=0, metavar="N", help="every request starts with the same N tokens (prefix-cache studies)")
    g.add_argument("--api-key-env", default=None, metavar="VAR", help="the environment variable holding the API key")
    g.add_argument("--insecure", action="store_true", help="accept a self-signed TLS certificate")
    g.add_argument("--seed-arrivals", type=bounded(int, 0, 2**63 - 1), default=0, help="seed of the open loop's arrival times")
    from tui_app.attach.otlp import add_otlp_arg

    add_otlp_arg(g)  # bench: the server's queue, prefill and decode per request, and the client's overhead beside them
    from tui_app.commands.sweep import add_sweep_args
    from tui_app.commands.workloads import add_workload_args

    add_workload_args(g)
    add_sweep_args(g)
    g.add_argument("--live", action="store_true", help="show the attach TUI while the load runs (the servers, the streams, the progress)")


def parse_slo(spec: str) -> dict[str, float]:
    """'ttft=500ms,itl=50ms' → {'ttft': 0.5, 'itl': 0.05} (seconds)."""
    out: dict[str, float] = {}
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        key, _, value = part.partition("=")
        key = key.strip().lower()
        if key not in SLO_KEYS or not value:
            raise UsageError(f"--slo {part!r}: expected KEY=VALUE with KEY one of {', '.join(SLO_KEYS)}, e.g. ttft=500ms")
        v = value.strip().lower()
        scale = 1e-3 if v.endswith("ms") else 1.0
        try:
            seconds = float(v.removesuffix("ms").removesuffix("s")) * scale
        except ValueError:
            raise UsageError(f"--slo {part!r}: {value!r} is not a time (500ms, 0.5s)") from None
        if seconds <= 0:
            raise UsageError(f"--slo {part!r}: must be more than 0")
        out[key] = seconds
    return out


@dataclass
class Request:
    """One request's numbers, as the attach client measured them."""

    run_id: int
    sent_s: float  # since the cell's start
    ok: bool
    prompt_tokens: int | None
    tokens: int
    ttft_s: float
    itl_s: list[float]
    e2e_s: float
    # Its X-ray (monitors/xray.py): trace and request ids, the server's phases with their sources, the overhead.
    xray: dict = field(default_factory=dict)
    round: int = 0
    cached_tokens: int | None = None  # of prompt_tokens, the server's prefix cache had (its own count)
    late_s: float | None = None  # sent this long after its planned time (open loop): the generator's own error
    conversation: int = -1
    turn: int = 0
    stop_reason: str = ""  # the attach client's: eos, max tokens, error, stopped (a sweep's step ended early)

    @property
    def tpot_s(self) -> float:
        return (self.e2e_s - self.ttft_s) / (self.tokens - 1) if self.ok and self.tokens > 1 else math.nan

    @property
    def mean_itl_s(self) -> float:
        return sum(self.itl_s) / len(self.itl_s) if self.itl_s else math.nan

    def good(self, slo: dict[str, float]) -> bool:
        got = {"ttft": self.ttft_s, "itl": self.mean_itl_s, "tpot": self.tpot_s, "e2e": self.e2e_s}
        return self.ok and all(not math.isnan(got[k]) and got[k] <= v for k, v in slo.items())


@dataclass
class Cell:
    server: str
    load: str  # "c4" closed loop, "r2.5/s" open loop
    prompt_tokens: int
    new_tokens: int
    requests: list[Request] = field(default_factory=list)
    server_figures: dict = field(default_factory=dict)
    slo: dict = field(default_factory=dict)
    round_walls: list[float] = field(default_factory=list)
    stopped: str | None = None  # why its rounds ended early (a sweep's step that cannot meet the SLO)
    planned: int = 0  # requests its rounds were to send
    key: str = ""  # what it is across servers (lengths, or the workload), for their ratios
    intervals: dict | None = field(default=None, repr=False)  # cell_stats.intervals, once the cell is done

    @property
    def wall_s(self) -> float:
        return sum(self.round_walls)

    def summary(self, name: str) -> Summary:
        ok = [r for r in self.requests if r.ok]
        values = {
            "ttft": [r.ttft_s for r in ok],
            "itl": [x for r in ok for x in r.itl_s],
            "tpot": [r.tpot_s for r in ok if not math.isnan(r.tpot_s)],
            "e2e": [r.e2e_s for r in ok],
        }[name]
        return Summary.of(values)

    def flat(self) -> dict:
        ok = [r for r in self.requests if r.ok]
        good = sum(r.good(self.slo) for r in self.requests) if self.slo else None
        d = {
            "server": self.server,
            "load": self.load,
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "requests": len(self.requests),
            "failed": sum(not r.ok and not (self.stopped and r.stop_reason == "stopped") for r in self.requests),
            "cut_short": sum(bool(self.stopped) and r.stop_reason == "stopped" for r in self.requests),  # by a sweep's step that could not pass
            "wall_s": self.wall_s,
            "server_prompt_tokens_mean": _mean([r.prompt_tokens for r in ok if r.prompt_tokens is not None]),
            "output_tok_s": sum(r.tokens for r in ok) / self.wall_s if self.wall_s else None,
            "requests_s": len(ok) / self.wall_s if self.wall_s else None,
            "slo": self.slo or None,
            "good": good,
            "goodput_requests_s": good / self.wall_s if good is not None and self.wall_s else None,
        }
        for name in SLO_KEYS:
            s = self.summary(name)
            for k in STATS:
                d[f"{name}_{k}_s"] = _none_if_nan(getattr(s, k))
        d.update({f"server_{k}": v for k, v in self.server_figures.items()})
        from tui_app.commands import cell_stats

        d.update(fmt.strict_json(cell_stats.flat(self)))
        for name in XRAY_COLUMNS:
            s = self.xray_summary(name)
            for k in ("mean", "p50", "p99"):
                d[f"{name}_{k}_s"] = _none_if_nan(getattr(s, k))
        return d

    def xray_summary(self, name: str) -> Summary:
        """The server's account over the cell's requests (server_queue, server_prefill, …), or the
        client's time outside it (overhead_ttft, overhead_e2e)."""
        return Summary.of([r.xray[f"{name}_s"] for r in self.requests if r.ok and isinstance(r.xray.get(f"{name}_s"), (int, float))])


def _none_if_nan(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _mean(xs: list) -> float | None:
    return sum(xs) / len(xs) if xs else None


class Prompts:
    """Prompts of a token length measured by the server's own tokenizer where it offers one
    (llama.cpp and vLLM: /tokenize and /detokenize), else cut by characters (about 4 a token)."""

    def __init__(self, client, texts: list[str] | None, shared_prefix: int):
        self.client = client
        self.texts = texts
        self.shared_prefix = shared_prefix
        self.exact = True
        self.ids: list[int] | bool | None = False  # False: not asked yet
        from tui_app.commands.workloads import SALT

        self.made = 0 if texts else SALT  # the next call's start: made texts start where no earlier run's did

    async def _tokens(self, text: str) -> list[int] | None:
        c = self.client
        for body in ({"content": text, "add_special": False}, {"model": c.model, "prompt": text, "add_special_tokens": False}):
            try:
                r = await c.http.post(c.root + "/tokenize", json=body, headers=c._headers, timeout=10)
            except Exception:  # noqa: BLE001 - no such endpoint, or not this shape: try the next
                continue
            if r.status_code == 200 and isinstance(r.json().get("tokens"), list):
                return [t if isinstance(t, int) else t.get("id") for t in r.json()["tokens"]]
        return None

    async def _text(self, tokens: list[int]) -> str | None:
        c = self.client
        for body, key in (({"tokens": tokens}, "content"), ({"model": c.model, "tokens": tokens}, "prompt")):
            try:
                r = await c.http.post(c.root + "/detokenize", json=body, headers=c._headers, timeout=10)
            except Exception:  # noqa: BLE001 - as above
                continue
            if r.status_code == 200 and isinstance(r.json().get(key), str):
                return r.json()[key]
        return None

    async def reference_ids(self) -> list[int] | None:
        """The reference text's tokens by the server's tokenizer (asked once)."""
        from tui_app.prompts import reference_text

        if self.ids is False:
            self.ids = await self._tokens(reference_text() * 2)
        return self.ids or None

    async def make(self, n_tokens: int, count: int) -> list[str]:
        """`count` prompts of about `n_tokens` tokens; different from each other after the shared
        prefix, and from every earlier call's (so no cell finds another's in the prefix cache)."""
        from tui_app.prompts import reference_text

        start, self.made = self.made, self.made + count
        if self.texts:
            return [self.texts[i % len(self.texts)] for i in range(start, start + count)]
        base = reference_text()
        ids = await self.reference_ids()
        out = []
        i = start
        for k in range(count):
            text = None
            for _ in range(4 if ids else 0):
                # A cut can merge with its neighbour when the server tokenizes the text again: such a
                # text is passed over for the next, so every prompt is exactly n_tokens long.
                text = await self._text(_variant(ids or [], self.shared_prefix, i, n_tokens))
                i += 1
                back = await self._tokens(text) if text is not None else None
                if text is None or back is None or len(back) == n_tokens:
                    break
            if text is None:
                self.exact = False
                text = " ".join(_rotated(base.split(), self.shared_prefix, 5 * (start + k)) * 4)[: n_tokens * 4]
            out.append(text)
        self.made = max(self.made, i)
        return out


def _variant(ids: list[int], keep: int, i: int, n: int) -> list[int]:
    """The `i`-th prompt of `n` tokens from the reference tokens: the first `keep` as they are, then
    the rest read from an offset of its own, with a stride of its own once the offsets run out (a
    stride coprime with the length visits every token once), repeated to length."""
    head, tail = ids[:keep], ids[keep:]
    if not tail:
        return (head * (n // max(len(head), 1) + 1))[:n]
    size = len(tail)
    strides = [s for s in range(1, min(size, 400)) if math.gcd(s, size) == 1]
    stride = strides[(i // size) % len(strides)]
    at = (7 * i) % size
    return (head + [tail[(at + j * stride) % size] for j in range(max(n - keep, 0))])[:n]


def _rotated(items: list, keep: int, by: int) -> list:
    """The first `keep` items, then the rest rotated by `by`: each request its own text after a shared prefix."""
    head, tail = items[:keep], items[keep:]
    k = by % len(tail) if tail else 0
    return head + tail[k:] + tail[:k]


def xray_markdown(cells: list[Cell]) -> str:
    """Where each cell's requests spent their time by the server's account (its span), and the
    client's time outside it: mean / p50 / p99 in ms."""
    head = "| server | load | prompt→new | with a span | queue | prefill | decode | outside the server: TTFT | e2e |"
    lines = ["Server phases, mean / p50 / p99 ms (each figure's source is in the JSON):", "", head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for c in cells:
        spans = sum(1 for r in c.requests if r.xray.get("server_source") == "otlp")

        def three(name: str, c=c) -> str:
            s = c.xray_summary(name)
            return " / ".join(fmt.ms(getattr(s, k), 1, unit=False) for k in ("mean", "p50", "p99"))

        lines.append(
            f"| {c.server} | {c.load} | {c.prompt_tokens}→{c.new_tokens} | {spans}/{len(c.requests)} | " + " | ".join(three(n) for n in XRAY_COLUMNS) + " |"
        )
    notes = {r.xray["server_note"] for c in cells for r in c.requests if r.xray.get("server_note")}
    return "\n".join(lines + [f"\n{n}" for n in sorted(notes)[:3]])


def markdown(cells: list[Cell]) -> str:
    head = (
        "| server | load | prompt→new | requests | TTFT p50/p95/p99 | ITL p50/p95/p99 | TPOT mean | e2e p50 | output tok/s | req/s "
        "| goodput req/s | KV peak | waiting peak | preempted | prefix hits |"
    )
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    from tui_app.commands.cell_stats import prompt_text

    for c in cells:
        d = c.flat()
        ttft, itl = c.summary("ttft"), c.summary("itl")
        good = f"{d['goodput_requests_s']:.2f} ({d['good']}/{d['requests']})" if d["good"] is not None else "–"
        lines.append(
            f"| {c.server} | {c.load} | {prompt_text(c)}→{c.new_tokens} | {d['requests']}"
            + (f" ({d['failed']} failed)" if d["failed"] else "")
            + (f" ({d['cut_short']} cut short)" if d["cut_short"] else "")
            + f" | {fmt.ms(ttft.p50, 0)} / {fmt.ms(ttft.p95, 0)} / {fmt.ms(ttft.p99, 0)}"
            f" | {fmt.ms(itl.p50)} / {fmt.ms(itl.p95)} / {fmt.ms(itl.p99)} | {fmt.ms(c.summary('tpot').mean)} | {fmt.ms(c.summary('e2e').p50, 0)}"
            f" | {fmt.num(d['output_tok_s'])} | {fmt.num(d['requests_s'], 2)} | {good}"
            f" | {fmt.pct(c.server_figures.get('kv_usage_peak'))} | {fmt.num(c.server_figures.get('waiting_peak'), 0)}"
            f" | {fmt.num(c.server_figures.get('preemptions'), 0)} | {fmt.pct(c.server_figures.get('prefix_hit'))} |"
        )
    return "\n".join(lines)


def write_outputs(args, cells: list[Cell], env: dict, extra: dict | None = None) -> bool:
    """Each file asked for, whole; False, said in one line, where one cannot be written. `extra`:
    the JSON's other sections (the servers' ratios, a sweep's steps and headroom)."""
    rows = [c.flat() for c in cells]
    for kind in args.output:
        path = f"{args.out}.{kind}"
        if kind == "json":
            data = {
                "environment": env,
                "results": rows,
                "requests": [[{**vars(r), "tpot_s": _none_if_nan(r.tpot_s)} for r in c.requests] for c in cells],
                **(extra or {}),
            }
            text = json.dumps(fmt.strict_json(data), indent=2, default=str, allow_nan=False)  # a failed request's TTFT is NaN
        elif kind == "jsonl":
            text = "".join(json.dumps({**row, "environment": env}, default=str, allow_nan=False) + "\n" for row in rows)
        else:
            text = csv_text(rows, "server")
        if not write_file(path, text):
            return False
    return True


def read_prompts(path: str) -> list[str]:
    from tui_app.prompts import read_prompt_file

    try:
        text = read_prompt_file(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                out.append(str(json.loads(line)["prompt"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise UsageError(f"--prompts {path}: line {n} is JSON without a 'prompt' field") from None
        else:
            out.append(line)
    if not out:
        raise UsageError(f"--prompts {path}: no prompts in it")
    return out
