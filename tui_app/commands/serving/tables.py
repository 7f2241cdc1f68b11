"""The serving benchmark's cells and what is made of them: each request's numbers, each cell's
summaries and row, the markdown tables and the files (`tokentop bench --endpoint`, command.py)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from monitors.timing import Summary
from tui_app.core import fmt
from tui_app.core.options import csv_text, write_file

SLO_KEYS = ("ttft", "ttfa", "itl", "tpot", "e2e")
XRAY_COLUMNS = ("server_queue", "server_prefill", "server_decode", "overhead_ttft", "overhead_e2e")
STATS = ("mean", "std", "p50", "p90", "p95", "p99")


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
    ttfa_s: float = math.nan  # a reasoning model's time to its first answer token (its TTFT where it does not think)
    thinking_tokens: int = 0

    @property
    def tpot_s(self) -> float:
        return (self.e2e_s - self.ttft_s) / (self.tokens - 1) if self.ok and self.tokens > 1 else math.nan

    @property
    def mean_itl_s(self) -> float:
        return sum(self.itl_s) / len(self.itl_s) if self.itl_s else math.nan

    def good(self, slo: dict[str, float]) -> bool:
        got = {"ttft": self.ttft_s, "ttfa": self.ttfa_s, "itl": self.mean_itl_s, "tpot": self.tpot_s, "e2e": self.e2e_s}
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
            "ttfa": [r.ttfa_s for r in ok if not math.isnan(r.ttfa_s)],
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
            "thinking_share": thinking_share(ok),
        }
        for name in SLO_KEYS:
            s = self.summary(name)
            for k in STATS:
                d[f"{name}_{k}_s"] = _none_if_nan(getattr(s, k))
        d.update({f"server_{k}": v for k, v in self.server_figures.items()})
        from tui_app.commands.serving import cell_stats

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


def thinking_share(requests: list[Request]) -> float | None:
    """Of the requests' new tokens, the share that was thinking (by tokentop's own count of the streams)."""
    tokens = sum(r.tokens for r in requests)
    return sum(r.thinking_tokens for r in requests) / tokens if tokens else None


def reasoning_markdown(cells: list[Cell]) -> str:
    """A reasoning model's cells: when the answer began, and how much of the output was thinking."""
    head = "| server | load | prompt→new | TTFT p50 | TTFA p50/p95/p99 | thinking share |"
    lines = ["A reasoning model's answer, after its thinking (docs/reasoning.md):", "", head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for c in cells:
        ttfa, share = c.summary("ttfa"), thinking_share([r for r in c.requests if r.ok])
        lines.append(
            f"| {c.server} | {c.load} | {c.prompt_tokens}→{c.new_tokens} | {fmt.ms(c.summary('ttft').p50, 0)}"
            f" | {fmt.ms(ttfa.p50, 0)} / {fmt.ms(ttfa.p95, 0)} / {fmt.ms(ttfa.p99, 0)} | {fmt.pct(share)} |"
        )
    return "\n".join(lines)


def _none_if_nan(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _mean(xs: list) -> float | None:
    return sum(xs) / len(xs) if xs else None


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
    from tui_app.commands.serving.cell_stats import prompt_text

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


def write_outputs(out: str, kinds: list[str], cells: list[Cell], env: dict, extra: dict | None = None) -> bool:
    """Each file asked for, whole; False, said in one line, where one cannot be written. `extra`:
    the JSON's other sections (the servers' ratios, a sweep's steps and headroom)."""
    rows = [c.flat() for c in cells]
    for kind in kinds:
        path = f"{out}.{kind}"
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
