"""A fleet of serving replicas, read from the Prometheus that already scrapes them: a row per
replica and a row for the fleet, from a fixed set of PromQL queries per refresh however many
replicas there are (Prometheus does the arithmetic; tokentop scrapes nothing itself).

- Replicas are Prometheus' own targets (`up`), narrowed by a label selector; each row is a
  target, split further by a data-parallel engine's `engine` label, and a router's per-backend
  series (the vLLM production-stack router's `server` label) are rows of their own ("via").
- The engine family of a row comes from its metric prefix (monitors.servers' tables: `vllm:`,
  `sglang:`, `llamacpp:`, `tgi_`, `dynamo_`); every figure is written once per family from those
  tables, the families joined with `or`, so a mixed fleet costs no extra query.
- Gauges are read as they are (KV usage averaged), counters as `rate()` over the window, and
  latency quantiles with `histogram_quantile` over bucket rates summed per replica, and for the
  fleet over every replica's buckets together: never an average of the replicas' quantiles.
- The fleet's figures leave out a router's per-backend series, which count the same requests
  its backends count.
- Energy where a DCGM exporter is scraped: the GPUs' power (`DCGM_FI_DEV_POWER_USAGE`, W) and
  joules per generated token (Δ`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, mJ, ÷ Δ generated tokens
  over the window). Every DCGM series Prometheus has is counted (the exporter's labels name GPUs
  and hosts, not the replicas' jobs).
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from monitors.prometheus import QUERY, Prometheus, PrometheusError, Vector
from monitors.servers import ENGINES, EngineTable, Figure

REPLICA = ("job", "instance", "engine", "server")
BY = " by (job, instance, engine, server)"
ROW_FIGURES = ("kv_usage", "running", "waiting", "prompt_tps", "gen_tps", "ttft", "itl", "preemptions", "prefix_hit")
QUANTILES = (("p50", 0.5), ("p99", 0.99))
KV_HOT = 0.95  # a replica's KV cache this full is marked
FAR = 2.0  # a replica's p99 this many times the fleet's is marked
DCGM_POWER, DCGM_ENERGY = "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
FAMILIES: tuple[EngineTable, ...] = tuple(e for e in ENGINES if e.figures)
PREFIXES = ", ".join(e.prefix for e in FAMILIES)


class SelectorError(ValueError):
    pass


class Selector:
    """A label selector given on the command line (`{job="vllm"}`, or its matchers alone), added to
    every series the queries read."""

    def __init__(self, text: str = ""):
        text = (text or "").strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1].strip()
        if "{" in text or "}" in text or (text and not re.match(r'^\s*[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"', text)):
            raise SelectorError(f'--match {text!r}: expected label matchers such as \'{{job="vllm"}}\' or \'{{namespace="llm", pod=~"vllm-.*"}}\'')
        self.inner = text.rstrip(",")

    def __call__(self, metric: str, *extra: str) -> str:
        matchers = ",".join(m for m in (self.inner, *extra) if m)
        return f"{metric}{{{matchers}}}"

    def __str__(self) -> str:
        return "{" + self.inner + "}"


def _tag(expr: str, **labels: str) -> str:
    """`expr` with constant labels added, so the answers of several expressions joined by `or`
    stay apart (label_replace with an empty source sets the label on every series)."""
    for name, value in labels.items():
        expr = f'label_replace({expr}, "{name}", "{value}", "", "")'
    return expr


def _expr(fig: Figure, sel: Selector, window: str, by: str, extra: tuple[str, ...], q: float | None = None) -> str:
    """One figure of one engine family as PromQL: `by` empty for the fleet, BY for rows."""

    def alt(build) -> str:
        # A renamed metric (vLLM's gpu_cache_usage_perc → kv_cache_usage_perc): the first present wins.
        parts = [build(m) for m in fig.metrics]
        return parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)

    if fig.how == "gauge":
        op = "avg" if fig.mean else "sum"
        return alt(lambda m: f"{op}{by} ({sel(m, *extra)})")
    if fig.how == "rate":
        return alt(lambda m: f"sum{by} (rate({sel(m, *extra)}[{window}]))")
    if fig.how == "ratio":
        num, other = (f"sum{by} (rate({sel(m, *extra)}[{window}]))" for m in fig.metrics[:2])
        return f"{num} / ({num} + {other})" if fig.add_num else f"{num} / {other}"
    le = f" by (le, {by.split('(', 1)[1]}" if by else " by (le)"
    return alt(lambda m: f"histogram_quantile({q}, sum{le} (rate({sel(m + '_bucket', *extra)}[{window}])))")


def figure_query(key: str, sel: Selector, window: str, fleet: bool = False) -> str:
    """Every family's `key` in one query, each series labelled tt_engine (and tt_q for quantiles)."""
    by, extra = ("", ('server=""',)) if fleet else (BY, ())
    terms = []
    for fam in FAMILIES:
        fig = fam.figures.get(key)
        if fig is None:
            continue
        if fig.how == "quantiles":
            terms += [_tag(_expr(fig, sel, window, by, extra, q), tt_q=name, tt_engine=fam.name) for name, q in QUANTILES]
        else:
            terms.append(_tag(_expr(fig, sel, window, by, extra), tt_engine=fam.name))
    return " or ".join(terms)


def fleet_query(sel: Selector, window: str) -> str:
    """The fleet's figures and energy in one query, each series labelled tt_fig."""
    terms = [_tag(f"({figure_query(key, sel, window, fleet=True)})", tt_fig=key) for key in ROW_FIGURES]
    no_router = 'server=""'
    gen = " or ".join(
        _tag(f"sum(increase({sel(f.figures['gen_tps'].metrics[0], no_router)}[{window}]))", tt_engine=f.name) for f in FAMILIES if "gen_tps" in f.figures
    )
    terms += [
        _tag(f"sum({DCGM_POWER})", tt_fig="power_w"),
        _tag(f"count({DCGM_POWER})", tt_fig="gpus"),
        _tag(f"sum(increase({DCGM_ENERGY}[{window}])) / 1000", tt_fig="energy_j"),
        _tag(f"({gen})", tt_fig="gen_tokens"),
    ]
    return " or ".join(terms)


def duration_text(seconds: float) -> str:
    """A PromQL duration: whole seconds ("90s")."""
    return f"{max(round(seconds), 1)}s"


def _num(v: float) -> float | None:
    return None if math.isnan(v) or math.isinf(v) else v


def _key(labels: dict) -> tuple[str, ...]:
    return tuple(labels.get(name, "") for name in REPLICA)


def row_name(row: dict) -> str:
    """A row as the pane shows it: the target's instance, its data-parallel engine, a router's backend."""
    name = row["instance"]
    if row.get("engine"):
        name += f" e{row['engine']}"
    if row.get("server"):
        backend = re.sub(r"^https?://", "", row["server"])
        name = f"{name} → {backend}"
    return name


def fold_fleet(vector: Vector) -> dict:
    """The fleet query's answer as figures: families summed (KV: their mean), quantiles from the
    family that generates most (fleets of two families are rare; their buckets do not add up)."""
    per: dict[str, dict] = {}
    out: dict = {}
    for labels, value in vector:
        fig, fam = labels.get("tt_fig", ""), labels.get("tt_engine", "")
        v = _num(value)
        if "tt_q" in labels:
            per.setdefault(fam, {}).setdefault(fig, {})[labels["tt_q"]] = v
        elif fig in ("power_w", "gpus", "energy_j"):
            out[fig] = v
        else:
            per.setdefault(fam, {})[fig] = v
    fams = sorted(per, key=lambda f: -(per[f].get("gen_tps") or 0.0))
    for key in (*ROW_FIGURES, "gen_tokens"):
        vals = [per[f][key] for f in fams if per[f].get(key) is not None]
        if not vals:
            continue
        if isinstance(vals[0], dict):
            out[key] = vals[0]
        elif key == "kv_usage":
            out[key] = sum(vals) / len(vals)
        elif key == "prefix_hit":
            out[key] = vals[0]
        else:
            out[key] = sum(vals)
    if out.get("energy_j") is not None and out.get("gen_tokens"):
        out["j_per_token"] = out["energy_j"] / out["gen_tokens"]
    return out


@dataclass
class TargetState:
    up: bool
    since: float | None  # unix seconds of the last change seen; None: before what Prometheus was asked about
    error: str = ""  # Prometheus' last scrape error for a target that is down


@dataclass
class Fleet:
    """The replicas behind a selector, refreshed with a fixed number of queries each time:
    `up`, one per row figure and one for the fleet (`len(self.queries) + 1`)."""

    prom: Prometheus
    selector: Selector = field(default_factory=Selector)
    window_s: float = 60.0
    states: dict = field(default_factory=dict)  # (job, instance) → TargetState
    known: dict = field(default_factory=dict)  # row key → family, of every replica seen exporting an engine's metrics
    errors: dict = field(default_factory=dict)  # query name → the error said for it (once)
    others: list = field(default_factory=list)  # jobs the selector matched that export no engine's metrics
    sentinel: Any = None  # monitors.fleet_leaks.Sentinel: each replica's memory trend, where asked for

    def __post_init__(self) -> None:
        w = duration_text(self.window_s)
        self.queries = {key: figure_query(key, self.selector, w) for key in ROW_FIGURES}
        self.queries["fleet"] = fleet_query(self.selector, w)
        self.up_query = self.selector("up")

    async def check(self) -> str:
        """Prometheus answers, lets us in, and takes the selector: its version, else PrometheusError
        (a selector it refuses is said with the selector)."""
        version = await self.prom.version()
        try:
            await self.prom.query(self.up_query)
        except PrometheusError as exc:
            if exc.kind == QUERY:
                raise PrometheusError(QUERY, f"--match {self.selector}: {exc}", exc.query) from None
            raise
        return version

    async def describe_targets(self) -> str:
        """What Prometheus scrapes, by job: said when the selector matches no replica."""
        try:
            targets = await self.prom.targets()
        except PrometheusError as exc:
            return f"its targets cannot be listed ({exc})"
        jobs: dict[str, list[int]] = {}
        for t in targets:
            counts = jobs.setdefault((t.get("labels") or {}).get("job", "?"), [0, 0])
            counts[0] += 1
            counts[1] += t.get("health") == "up"
        if not jobs:
            return "Prometheus scrapes no target at all"
        return "Prometheus scrapes " + ", ".join(f'job="{j}" ({n} targets, {u} up)' for j, (n, u) in sorted(jobs.items()))

    async def refresh(self, at: float | None = None) -> tuple[float, list[dict], dict, list[str]]:
        """(Prometheus' evaluation time, rows, fleet figures, notes): one evaluation instant for
        every query, so the rows and the fleet row describe the same moment. PrometheusError when
        Prometheus cannot be asked at all; a query it refuses is noted once, with its text, and
        the other figures go on."""
        import asyncio

        ts = time.time() if at is None else at
        names = list(self.queries)
        answers = await asyncio.gather(self.prom.query(self.up_query, ts), *(self.prom.query(self.queries[n], ts) for n in names), return_exceptions=True)
        for a in answers:  # Prometheus itself failing is the caller's to say, once
            if isinstance(a, BaseException) and not (isinstance(a, PrometheusError) and a.kind == QUERY):
                raise a
        if isinstance(answers[0], PrometheusError):
            raise answers[0]
        notes: list[str] = []
        results: dict[str, Vector] = {}
        for name, a in zip(names, answers[1:], strict=True):
            if isinstance(a, PrometheusError):
                if self.errors.get(name) != str(a):
                    self.errors[name] = str(a)
                    notes.append(f"{a} (the query for {name}: {a.query})")
                results[name] = []
            else:
                if self.errors.pop(name, None) is not None:
                    notes.append(f"the query for {name} answers again")
                results[name] = a  # type: ignore[assignment]
        current = {(lab.get("job", ""), lab.get("instance", "")): v == 1.0 for lab, v in answers[0]}  # type: ignore[union-attr]
        notes += await self._transitions(current, ts)
        rows = self._rows(current, results)
        fleet = fold_fleet(results["fleet"])
        self._mark(rows, fleet)
        if self.sentinel is not None:
            notes += await self.sentinel.apply(rows, ts)
        return ts, rows, fleet, notes

    async def _transitions(self, current: dict, ts: float) -> list[str]:
        """A target that went down or came back is said with the time; its row says since when,
        and a down one Prometheus' last scrape error."""
        changed = [t for t, up in current.items() if t in self.states and self.states[t].up != up]
        fresh_down = [t for t, up in current.items() if t not in self.states and not up]
        errors: dict = {}
        if any(not current[t] for t in changed) or fresh_down:
            with contextlib.suppress(PrometheusError):  # the rows say down all the same
                for x in await self.prom.targets():
                    labels = x.get("labels") or {}
                    errors[(labels.get("job", ""), labels.get("instance", ""))] = x.get("lastError", "")
        notes = []
        clock = time.strftime("%H:%M:%S", time.localtime(ts))
        for t, up in current.items():
            before = self.states.get(t)
            if before is None:
                self.states[t] = TargetState(up, None, "" if up else errors.get(t, ""))
            elif before.up != up:
                if up:
                    took = f" after {ts - before.since:.0f} s down" if before.since else ""
                    notes.append(f"{t[1]} ({t[0]}) up again at {clock}{took}")
                    self.states[t] = TargetState(True, ts)
                else:
                    why = errors.get(t, "")
                    notes.append(f"{t[1]} ({t[0]}) down at {clock}" + (f": {why}" if why else ""))
                    self.states[t] = TargetState(False, ts, why)
        return notes

    def _rows(self, current: dict, results: dict[str, Vector]) -> list[dict]:
        rows: dict[tuple, dict] = {}
        for key in ROW_FIGURES:
            for labels, value in results.get(key, ()):
                k = _key(labels)
                row = rows.setdefault(k, dict(zip(REPLICA, k, strict=True)))
                row["family"] = self.known[k] = labels.get("tt_engine", "")
                if "tt_q" in labels:
                    row.setdefault(key, {})[labels["tt_q"]] = _num(value)
                else:
                    row[key] = _num(value)
        # A replica seen before keeps its row while it is down (Prometheus marks its series stale);
        # a down target of a job that has replicas is one too, though tokentop never saw it up.
        for k, family in self.known.items():
            if k not in rows and k[:2] in current:
                rows[k] = {**dict(zip(REPLICA, k, strict=True)), "family": family}
        replica_jobs = {k[0] for k in self.known}
        for job, instance in current:
            if job in replica_jobs and not any(k[:2] == (job, instance) for k in rows):
                rows[(job, instance, "", "")] = {"job": job, "instance": instance, "engine": "", "server": "", "family": ""}
        # A target gone from Prometheus (a pod deleted, its name never back) leaves nothing behind.
        self.known = {k: v for k, v in self.known.items() if k[:2] in current}
        self.states = {t: v for t, v in self.states.items() if t in current}
        out = []
        for k in sorted(rows):
            row = rows[k]
            state = self.states.get(k[:2])
            row["up"] = current.get(k[:2])
            row["since"] = state.since if state else None
            row["error"] = state.error if state and not state.up else ""
            out.append(row)
        self.others = sorted({job for job, _ in current} - replica_jobs)
        return out

    def _mark(self, rows: list[dict], fleet: dict) -> None:
        """The hot spots: a replica down, KV ≥ 95 %, waiting while another replica idles, a p99 far
        from the fleet's."""
        idle = [r for r in rows if r.get("up") and not r.get("server") and not r.get("running") and not r.get("waiting")]
        for r in rows:
            marks = []
            if r.get("up") is False:
                marks.append("down")
            if (r.get("kv_usage") or 0) >= KV_HOT:
                marks.append(f"KV ≥ {KV_HOT:.0%}")
            if (r.get("waiting") or 0) > 0 and not r.get("server") and any(o is not r for o in idle):
                marks.append("waiting while others idle")
            for key, label in (("ttft", "TTFT"), ("itl", "ITL")):
                mine, theirs = (r.get(key) or {}).get("p99"), (fleet.get(key) or {}).get("p99")
                if mine and theirs and mine >= FAR * theirs:
                    marks.append(f"{label} p99 {mine / theirs:.1f}× fleet")
            r["marks"] = marks

    async def backfill(self, span_s: float, step_s: float, end: float | None = None) -> list[tuple[float, dict]]:
        """The fleet's figures over the last span_s seconds (one query_range), and each target's
        last change of `up` in that span (another): the charts and the rows' "since" start full."""
        end = time.time() if end is None else end
        step = max(step_s, span_s / 10_000)  # Prometheus answers at most 11,000 points a series
        fleet = await self.prom.query_range(self.queries["fleet"], end - span_s, end, step)
        ups = await self.prom.query_range(self.up_query, end - span_s, end, step)
        for labels, points in ups:
            if not points:
                continue
            up = points[-1][1] == 1.0
            since = points[-1][0]
            for t, v in reversed(points):
                if (v == 1.0) != up:
                    break
                since = t
            # The same all through the span: since before it, a time Prometheus was not asked about.
            self.states[(labels.get("job", ""), labels.get("instance", ""))] = TargetState(up, None if since == points[0][0] else since)
        at: dict[float, list] = {}
        for labels, points in fleet:
            for t, v in points:
                at.setdefault(t, []).append((labels, v))
        return [(t, fold_fleet(at[t])) for t in sorted(at)]
