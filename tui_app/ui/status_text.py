"""The status line's sentences, as pure functions of the session and the events: what the engine is
doing, what a key just asked for, and the items of the status bar with their priorities (which
leave first when the line is short). No Textual: the app and the status bar draw what these say."""

from __future__ import annotations

from typing import NamedTuple

from monitors.events import EngineError, EngineReady, FleetReady, LeverChanged, Phase, RunFinished, RunStarted
from monitors.phases import THINKING
from tui_app.core import fmt, readings
from tui_app.core.readings import short_value

FAILED = "engine failed — fix the cause and press R to restart, or q to quit"


def after(ev, auto: bool) -> str | None:
    """The state an event leaves the engine in, as the status line says it; None where it says nothing new."""
    if isinstance(ev, RunStarted):
        return f"run {ev.run_id}: generating"
    if isinstance(ev, RunFinished):
        return f"run {ev.run_id} done ({ev.stop_reason})" + (" · auto" if auto else "")
    if isinstance(ev, LeverChanged):
        # Mid-run: generating again, not the preparation phase that came before.
        return f"run {ev.run_id}: generating" if ev.run_id is not None else for_next_run(ev.lever, ev.value)
    if isinstance(ev, Phase):
        if ev.name == "pause":
            return "generating" if ev.done else "paused"
        return f"{ev.name}: {ev.detail}" + (f" ({ev.seconds:.1f} s)" if ev.done else "…")
    if isinstance(ev, EngineReady):
        if ev.server:
            return f"{ev.model} on the {ev.device} server at {ev.server['url']}"
        return f"{ev.model} on {fmt.where(ev)} ({ev.dtype}) ready in {ev.load_s:.1f} s"
    if isinstance(ev, FleetReady):
        return f"fleet {ev.selector} through Prometheus {ev.version} at {ev.url}"
    if isinstance(ev, EngineError) and ev.fatal:
        return FAILED
    return None


def restart_question(session) -> str:
    """R while the engine works: what a restart stops and keeps."""
    cur = session.current
    in_flight = f" Run {cur.started.run_id}, in flight, is stopped." if cur is not None and cur.finished is None else ""
    return f"The engine is working. Restart it?{in_flight} Finished runs are kept; compiled and quantized variants are rebuilt when next used."


def subtitle(ready: EngineReady) -> str:
    """The title bar's second part: the model and where it runs."""
    if ready.server:
        return f"{ready.model} · {ready.device} · {ready.server['url']}"
    leak = f" · DEMO LEAK {ready.demo_leak}" if ready.demo_leak else ""
    experts = f" · MoE: {ready.experts}" if ready.experts else ""
    return f"{ready.model}{experts} · {fmt.where(ready)} · {ready.dtype}{leak}"


def for_next_run(lever: str, value) -> str:
    """A lever set while no run is in flight."""
    return f"{lever} → {short_value(value)} for the next run (r starts it)"


def with_clock(state: str, phase: Phase | None, since: float | None, now: float) -> str:
    """A phase in progress with its seconds so far: a first compile takes a minute or more, and
    the clock shows it is working, not stuck."""
    if phase is not None and not phase.done and since is not None and state.startswith(f"{phase.name}: "):
        return f"{state} {now - since:.0f} s"
    return state


class Item(NamedTuple):
    variants: tuple[str, ...]  # longest first; fmt.fit picks the one that fits
    priority: int  # 0 always stays; the highest leaves first
    style: str  # of the text after the key, or of the whole item
    key: str | None = None  # a lever's key, drawn dim before its value
    figure: bool = False  # one of the run's figures, which move with every frame (the status bar draws them apart)


LABELS = {
    "cache": lambda v: "cache" if v else "no-cache",
    "compile": lambda v: "compile" if v else "eager",
    "quant": lambda v: v if v != "off" else "fp",
    "think": lambda v: "none" if v < 0 else f"≤{v}" if v else "off",
}


def cache_off(session) -> str:
    """Why the current run has no KV cache, as the screen says it."""
    cur = session.current
    return (cur.started.cache_note if cur is not None else "") or "every step recomputes the whole context"


def lever_label(lever: str, value) -> str:
    """A lever's value as the status line names it."""
    return LABELS.get(lever, str)(value)


def status_items(session, state: str, preset: str, auto: bool, wanted: dict | None = None, link: str | None = None) -> list[Item]:
    """Levers first, then what the engine is doing (so load/compile/quantize progress stays
    visible at 80 columns), then the current run's numbers and the memory read rate.
    wanted: levers switched by a key that the engine has not confirmed yet, shown at once as their
    new value with "…"; link: what the frame pacing says of a slow terminal (ui/frames.py)."""
    lev = session.levers
    wanted = wanted or {}
    green, bold = "bold green", "bold"
    items: list[Item] = []

    server = session.active_server()

    def lever(key: str, name: str, value, on: bool, priority: int = 0) -> None:
        value = wanted.get(name, value)
        label = f"c{value}" if server and name == "batch" else lever_label(name, value)  # a server's batch lever is its streams
        if name in wanted:
            label, on = f"{label}…", True
        items.append(Item((f"{key}:{label}",), priority, green if on else bold, key))

    if server:  # the server's own levers are its business; the client's are streams and prompts
        items.append(Item((server["engine"],), 1, "bold cyan"))
        if len(session.servers) > 1:
            lever("t", "server", server["label"], True)
        lever("b", "batch", lev.batch, lev.batch != 1)
    else:
        if session.current is not None and session.current.started.cache_note and not lev.cache:  # a script's: no key sets it
            items.append(Item((f"cache: off ({cache_off(session)})", "cache: off"), 0, "bold yellow"))
        else:
            lever("k", "cache", lev.cache, lev.cache)
        lever("c", "compile", lev.compile, lev.compile)
        lever("w", "quant", lev.quant, lev.quant != "off")
        lever("s", "spec", lev.spec, lev.spec != "off")
        lever("b", "batch", lev.batch, lev.batch != 1)
        if session.ready is not None and session.ready.thinks:  # a reasoning model's lever
            lever("T", "think", lev.think, bool(lev.think), priority=2)
    lever("l", "preset", preset, preset != "short", priority=3)
    if auto:
        items.append(Item(("auto",), 2, "bold magenta"))
    items.append(Item(tuple(f"│ {v}" for v in fmt.word_variants(state)), 1, "italic"))
    if link:
        items.append(Item((link,), 0, "bold yellow"))
    recorder = session.recorder
    if recorder is not None and recorder.stopped:  # the session goes on; what it no longer does stays in sight
        why = "disk full" if recorder.disk_full else "write failed"
        items.append(Item((f"rec stopped: {why}", "rec stopped"), 0, "bold red"))
    rec = session.current
    if rec is not None:
        st = rec.total
        items.append(Item(("│",), 0, "italic", figure=True))
        items.append(Item((f"TTFT {fmt.ms(st.ttft_s, 0)}",), 4, bold, figure=True))
        if fmt.phased(st):  # a reasoning model's: when its answer began, and how much of the run was thinking
            think = f"think {st.phase_tokens.get(THINKING, 0)} ({fmt.pct(st.thinking_share)})"
            items.append(Item((f"TTFA {fmt.ms(st.ttfa_s, 0)}",), 3, bold, figure=True))
            items.append(Item((think, f"think {fmt.pct(st.thinking_share)}"), 5, bold, figure=True))
        items.append(Item((f"ITL p50 {fmt.ms(st.itl.p50)}", f"ITL {fmt.ms(st.itl.p50)}"), 2, bold, figure=True))
        items.append(Item((f"{fmt.num(st.decode_tps)} tok/s",), 0, bold, figure=True))  # the headline number: stays
        wall = session.run_rooflines.get(rec.started.run_id)  # the roofline of the run's anatomy (p), at its end
        if wall is not None:
            items.append(Item((f"wall: {wall.short()}", f"wall: {wall.wall}"), 3, bold, figure=True))
    read = readings.read_rate(session)
    if read is not None:
        rate, frac = read
        ceiling = session.bandwidth.read_bps / 1e9
        items.append(Item((f"mem bw {frac:.2f} ({rate / 1e9:.1f} of {ceiling:.1f} GB/s)", f"mem bw {frac:.2f}"), 4, bold, figure=True))
    return items
