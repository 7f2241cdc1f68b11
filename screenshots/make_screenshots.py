"""Regenerate screenshots/*.png from the real app on the real model: Textual's SVG screenshot,
then rsvg-convert (Debian's librsvg2-bin). `make screenshots` runs this.

The session shown: a run of the short prompt, int8 switched on mid-run, then a run with prompt
lookup on the long (summarize-this) prompt, so every pane has something to show; the same at
160×45 with --ascii and in a 16-colour terminal's colours. The attach
picture: the real llama.cpp server (xllamacpp) on the bundled GGUF, one stream, then four. The
leak pictures: the leak view catching `--demo-leak 1` at 160×45 and 80×24. The anatomy picture:
a step's anatomy under plain, compile and int4 side by side (p, with m's read ceiling). The
colours pictures: prompt lookup on the story prompt, its accepted drafts underlined (o), the same
with the draft model, and the lookup run coloured by the model's confidence in each token (o three times). The ledger picture:
plain, int8 and int4 in turns, twice, then int4 + compile, plain, no cache and prompt lookup, on
the short prompt; then g. The batch picture: batch 4 of distinct prompts on the short one,
paused mid-run. The
script picture: tests/attach/scripts/pipeline_script.py watched, its third call streaming. The
demo picture: `tokentop demo`'s caption over three steps of the default tour. The fleet picture:
a real Prometheus (Debian's) scraping three real llama.cpp servers every second, tokentop's own
runs on the first, two streams of other traffic on the second, the third stopped (a replica down),
and a stand-in vLLM replica (tests/helpers/standins.py, served to the same Prometheus) whose memory
climbs 0.5 MB a second at a flat load: the leak sentinel's mark, over a 30 s span. The expert,
MI300X and thinking pictures: moe_shot.py, vendor_shot.py, thinking_shot.py.

Then `tokentop report` pages, rendered whole by headless Chromium: one of a recorded auto-repeat
session (int8 switched on in the first run, enough runs after it for the leak detector's verdict)
and one of a small `tokentop bench -o json`; and `tokentop serve` in Chromium, with `?` pressed.
With TOKENTOP_VLLM_PYTHON (the real vLLM's venv, as the test tier has it): the X-ray of a run of
eight streams on vLLM with four sequences at a time, its spans sent to tokentop's OTLP receiver,
and the report's timeline of a `bench --endpoint --otlp` on it. The headroom picture: the README's
`bench --endpoint --sweep` on a one-slot llama.cpp server, the report's throughput–latency curve.
Timed figures in them were taken on whatever load the machine had at the time.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from moe_shot import shoot_experts  # noqa: E402
from shots import to_png, until  # noqa: E402
from thinking_shot import shoot_thinking  # noqa: E402
from vendor_shot import shoot_amd  # noqa: E402

from monitors.events import Levers  # noqa: E402
from monitors.record import Recorder  # noqa: E402
from monitors.sampler import Sampler  # noqa: E402
from tests.helpers import browser  # noqa: E402
from tests.helpers.llama_server import LlamaServer  # noqa: E402
from tui_app.attach.client import AttachConfig  # noqa: E402
from tui_app.commands.run import engine_source  # noqa: E402
from tui_app.core.sources import AttachSource  # noqa: E402
from tui_app.engine.config import EngineConfig  # noqa: E402
from tui_app.requests import RunRequest  # noqa: E402
from tui_app.ui.app import TokentopApp  # noqa: E402
from tui_app.ui.look import Look  # noqa: E402
from tui_app.ui.screens.anatomy import AnatomyScreen  # noqa: E402

SIZES = [(160, 45), (80, 24)]


def named(look: str) -> Look:
    """A picture's look by its name: "ascii", "present", "light", or both of the last two."""
    return Look(ascii=look == "ascii", theme="light" if "light" in look else "dark", present="present" in look)


async def shoot(size: tuple[int, int], look: str = "") -> str:
    """look: "" (the full palette), "ascii" (--ascii), "16-colours" (a terminal with 16) or "present-light"."""
    app = TokentopApp(engine_source(EngineConfig()), RunRequest(max_new_tokens=120, ignore_eos=True), sampler=Sampler(hz=4), fps=8, look=named(look))
    if look == "16-colours":
        app.colors = 16
    steps = lambda: sum(1 for p in app.session.latency)  # noqa: E731
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: steps() > 40)
        await pilot.press("w")
        await until(pilot, lambda: len(app.session.finished_ids) >= 1)
        await pilot.press("w", "w", "s", "l", "r")  # between runs levers wait for r
        await until(pilot, lambda: len(app.session.finished_ids) >= 2)
        await pilot.pause(1.0)
        name = f"tokentop-{look + '-' if look else ''}{size[0]}x{size[1]}"
        svg = app.save_screenshot(filename=name + ".svg", path=HERE)
        await pilot.press("q")
    return to_png(svg, size)


async def shoot_leak(size: tuple[int, int]) -> str:
    """The leak view (L) catching `--demo-leak 1`: short runs on auto-repeat until the verdict says suspected."""
    app = TokentopApp(engine_source(EngineConfig(demo_leak_mb=1.0)), RunRequest(max_new_tokens=8, ignore_eos=True), sampler=Sampler(hz=4), fps=8)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: len(app.session.finished_ids) >= 1)
        await pilot.press("a")
        await until(pilot, lambda: app.session.verdict is not None and app.session.verdict.status == "suspected" and app.session.verdict.n >= 16, 400)
        await pilot.press("a", "L")
        await pilot.pause(1.0)
        svg = app.save_screenshot(filename=f"tokentop-leak-{size[0]}x{size[1]}.svg", path=HERE)
        await pilot.press("q")
    return to_png(svg, size)


async def shoot_anatomy(size: tuple[int, int]) -> str:
    """The anatomy screen (p) with three lever mixes side by side: plain, compile, int4; the read
    ceiling measured (m) for the fp32 and the int4 weights, so each verdict weighs its bytes."""
    app = TokentopApp(engine_source(EngineConfig()), RunRequest(max_new_tokens=40, ignore_eos=True), sampler=Sampler(hz=4), fps=8)
    done = lambda: len(app.session.finished_ids)  # noqa: E731
    async with app.run_test(size=size) as pilot:
        for keys in ((), ("c",), ("c", "w", "w")):
            await until(pilot, lambda: not app.running and done() >= 1)
            if keys:  # levers wait for the next run; the first run under compile builds its graphs
                await pilot.press(*keys, "r")
                n = done()
                await until(pilot, lambda n=n: done() > n and not app.running)
            if keys != ("c",):
                measured = app.session.bandwidth
                await pilot.press("m")
                await until(pilot, lambda m=measured: app.session.bandwidth is not m)
            n = done()
            await pilot.press("p")
            await until(pilot, lambda n=n: isinstance(app.screen, AnatomyScreen) and done() > n and not app.running, 300)
            app.screen.show()
            if keys != ("c", "w", "w"):
                await pilot.press("escape")
        await pilot.pause(1.0)
        svg = app.save_screenshot(filename=f"tokentop-anatomy-{size[0]}x{size[1]}.svg", path=HERE)
        await pilot.press("escape", "q")
    return to_png(svg, size)


async def shoot_colours(size: tuple[int, int], colouring: str = "origin", spec: str = "lookup") -> str:
    """Prompt lookup (or the draft model) on the story prompt, its tokens coloured by origin (o:
    the accepted drafts underlined) or by confidence (o three times)."""
    app = TokentopApp(engine_source(EngineConfig()), RunRequest(preset="story", max_new_tokens=120, ignore_eos=True), sampler=Sampler(hz=4), fps=8)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: not app.running and len(app.session.finished_ids) >= 1)
        await pilot.press(*"s" * (1 if spec == "lookup" else 2), *"o" * (1 if colouring == "origin" else 3), "r")
        await until(pilot, lambda: not app.running and len(app.session.finished_ids) >= 2)
        await pilot.pause(1.0)
        name = ("colours" if colouring == "origin" else colouring) + ("" if spec == "lookup" else f"-{spec}")
        svg = app.save_screenshot(filename=f"tokentop-{name}-{size[0]}x{size[1]}.svg", path=HERE)
        await pilot.press("q")
    return to_png(svg, size)


async def shoot_batch(size: tuple[int, int]) -> str:
    """Batch 4 of distinct prompts on the short one, mid-run: the KV pane's rows, queue and pace."""
    req = RunRequest(preset="short", max_new_tokens=128, ignore_eos=True)
    app = TokentopApp(engine_source(EngineConfig(levers=Levers(batch=4))), req, sampler=Sampler(hz=4), fps=8)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.session.token_count >= 72)
        await pilot.press("space")  # paused: the picture holds one step's state in every pane
        await pilot.pause(1.0)
        svg = app.save_screenshot(filename=f"tokentop-batch-{size[0]}x{size[1]}.svg", path=HERE)
        await pilot.press("q")
    return to_png(svg, size)


async def shoot_ledger(size: tuple[int, int]) -> str:
    """The lever ledger (g) after plain, int8 and int4 in turns, twice, then int4 + compile, plain,
    no cache and prompt lookup once each, on the short prompt."""
    app = TokentopApp(engine_source(EngineConfig()), RunRequest(preset="short", max_new_tokens=48, ignore_eos=True), sampler=Sampler(hz=4), fps=8)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: not app.running and len(app.session.finished_ids) >= 1)
        for keys in ("w", "w", "w", "w", "w", "c", "cw", "k", "ks"):  # each then run by r
            n = len(app.session.finished_ids)
            await pilot.press(*keys, "r")
            await until(pilot, lambda n=n: not app.running and len(app.session.finished_ids) > n)
        await pilot.press("g")
        await pilot.pause(1.0)
        svg = app.save_screenshot(filename=f"tokentop-ledger-{size[0]}x{size[1]}.svg", path=HERE)
        await pilot.press("g", "q")
    return to_png(svg, size)


async def shoot_script(size: tuple[int, int]) -> str:
    """A user's pipeline script watched (`tokentop -- python pipeline_script.py`): its third call streaming."""
    from tui_app.attach.script import ScriptSource
    from tui_app.engine.models import converted_default

    script = os.path.join(os.path.dirname(HERE), "tests", "attach", "scripts", "pipeline_script.py")
    with tempfile.TemporaryDirectory() as tmp:
        source = ScriptSource([sys.executable, script, str(converted_default()), "4"], os.path.join(tmp, "script.log"))
        app = TokentopApp(source, None, sampler=Sampler(hz=4), fps=8)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: len(app.session.finished_ids) == 2 and not app.session.current.finished and app.session.current.total.n_tokens >= 8)
            runs = app.monitor.panes["runs"]
            runs.dirty = True
            runs.redraw(force=True)  # the third call's row now, not at the table's once-a-second refresh
            await pilot.pause(0.3)
            svg = app.save_screenshot(filename=f"tokentop-script-{size[0]}x{size[1]}.svg", path=HERE)
            await pilot.press("q")
    return to_png(svg, size)


async def shoot_attach(size: tuple[int, int]) -> str:
    server = LlamaServer()
    try:
        source = AttachSource([AttachConfig(url=server.url, metrics_hz=4, label="llama.cpp")])
        app = TokentopApp(source, RunRequest(max_new_tokens=120), sampler=Sampler(hz=4), fps=8)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: len(app.session.finished_ids) >= 1)
            await pilot.press("b", "b", "r")
            await until(pilot, lambda: len(app.session.finished_ids) >= 2)
            await pilot.pause(2.0)
            name = f"tokentop-attach-{size[0]}x{size[1]}"
            svg = app.save_screenshot(filename=name + ".svg", path=HERE)
            await pilot.press("q")
    finally:
        server.close()
    return to_png(svg, size)


async def shoot_fleet(size: tuple[int, int]) -> str:
    """`tokentop attach --prometheus URL FIRST`: the fleet pane over three real servers."""
    import threading

    import httpx

    from tests.helpers.prometheus import PrometheusServer, StandIns, group
    from tests.helpers.standins import vllm_replica
    from tui_app.attach.fleet import FleetConfig
    from tui_app.core.sources import FleetSource

    servers = [LlamaServer() for _ in range(3)]
    stop = threading.Event()

    def traffic(url: str) -> None:  # another user's requests, on the second replica
        while not stop.is_set():
            httpx.post(url + "/v1/completions", json={"prompt": "Tell me about the sea.", "max_tokens": 24, "ignore_eos": True}, timeout=60)

    standins = StandIns()
    standins.texts["/leaky"] = vllm_replica(1, rss_mb=1800, rss_mb_per_s=0.5)
    with tempfile.TemporaryDirectory() as tmp:
        prom = PrometheusServer(tmp)
        others = [threading.Thread(target=traffic, args=(servers[1].url,)) for _ in range(2)]
        try:
            prom.set_targets("llama", [group("llama", f"127.0.0.1:{s.port}") for s in servers])
            prom.set_targets("vllm", [group("vllm", standins.address, instance="vllm-standin:8000", path="/leaky")])
            prom.wait_up("llama", 3)
            prom.wait_up("vllm", 1)
            for t in others:
                t.start()
            own = [AttachConfig(url=servers[0].url, metrics_hz=1)]
            cfg = FleetConfig(prom.url, match='{job=~"llama|vllm"}', window_s=10, every_s=1, backfill_s=120, leak_span_s=30, runs=own)
            app = TokentopApp(FleetSource(cfg), RunRequest(max_new_tokens=64), sampler=Sampler(hz=4), fps=8, auto=True)
            async with app.run_test(size=size) as pilot:
                await until(pilot, lambda: len(app.session.finished_ids) >= 2)
                servers[2].kill()
                await until(pilot, lambda: app.session.fleet is not None and any(r.get("up") is False for r in app.session.fleet.rows))
                await until(pilot, lambda: len(app.session.finished_ids) >= 5)
                await until(pilot, lambda: any(m.startswith("RSS") for r in app.session.fleet.rows for m in r.get("marks") or ()))
                await pilot.pause(2.0)
                name = f"tokentop-fleet-{size[0]}x{size[1]}"
                svg = app.save_screenshot(filename=name + ".svg", path=HERE)
                await pilot.press("a", "q")
        finally:
            stop.set()
            for t in others:
                if t.is_alive():
                    t.join()
            prom.close()
            standins.close()
            for s in servers:
                s.close()
    return to_png(svg, size)


async def shoot_demo(size: tuple[int, int], look: str = "") -> str:
    """`tokentop demo`'s caption: three steps of the default tour, held on int4 once its effect is
    measured; look "present-light": `--present --theme light`."""
    from dataclasses import replace

    from tui_app.core.tour import default_tour
    from tui_app.ui.demo_app import DemoApp

    tour = {s.label: s for s in default_tour(tokens=48, seconds=0)}
    steps = [tour["plain"], tour["int8"], replace(tour["int4"], seconds=600)]
    app = DemoApp(steps, engine_source(EngineConfig()), sampler=Sampler(hz=4), fps=8, look=named(look))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: "int4" in app.tour_log.results)
        await pilot.pause(1.0)
        name = f"tokentop-demo-{look + '-' if look else ''}{size[0]}x{size[1]}"
        svg = app.save_screenshot(filename=name + ".svg", path=HERE)
        await pilot.press("q")
    return to_png(svg, size)


async def record_session(path: str, runs: int = 12) -> None:
    """An auto-repeat session of short runs, recorded: int8 is switched on in the first run (a
    re-prefill), and the rest give the leak detector the runs it needs after that preparation."""
    app = TokentopApp(engine_source(EngineConfig()), RunRequest(max_new_tokens=24), recorder=Recorder(path), sampler=Sampler(hz=4), fps=4, auto=True)
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: len(app.session.latency) > 10)
        await pilot.press("w")
        await until(pilot, lambda: len(app.session.finished_ids) >= runs, timeout=600)
        await pilot.press("a", "q")
    app.session.recorder.close()


def reports(tmp: str) -> list[str]:
    from tui_app.commands.report import build, write_html

    recording = os.path.join(tmp, "session.jsonl")
    asyncio.run(record_session(recording))
    stem = os.path.join(tmp, "bench")
    bench = [sys.executable, "-m", "tui_app", "bench", "--levers", "plain,int8,lookup", "--lengths", "32:32,256:32", "--warmup", "1", "--repeats", "3"]
    subprocess.run([*bench, "-o", "json", "--out", stem], check=True, stdout=subprocess.DEVNULL)
    out = []
    with browser.chromium() as chrome:
        for name, src in (("report-session", recording), ("report-bench", stem + ".json")):
            page = os.path.join(tmp, name + ".html")
            write_html(build(src), page)
            png = os.path.join(HERE, name + ".png")
            visit = browser.render_file(chrome, page, png, width=1100)
            if visit.console_errors or visit.page_errors or visit.blocked:
                raise RuntimeError(f"{name}: {visit}")
            out.append(png)
    return out


def served() -> list[str]:
    first, help_ = os.path.join(HERE, "serve-browser.png"), os.path.join(HERE, "serve-browser-help.png")
    with (
        tempfile.TemporaryDirectory() as tmp,
        browser.serving(os.path.join(tmp, "serve.log"), "--no-record", "--max-new-tokens", "48") as url,
        browser.chromium() as chrome,
    ):
        browser.browse_app(chrome, url, first, help_, ready="run 1 done")
    return [first, help_]


async def shoot_xray(url: str, address: str, size: tuple[int, int]) -> str:
    source = AttachSource([AttachConfig(url=url, concurrency=8, otlp=address, metrics_hz=4, label="vLLM", timeout_s=600)])
    app = TokentopApp(source, RunRequest(max_new_tokens=32, ignore_eos=True), sampler=Sampler(hz=4), fps=8)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: len(app.session.finished_ids) >= 1, timeout=600)
        run_id = app.session.finished_ids[-1]
        spans = lambda: app.session.xray.requests(run_id)  # noqa: E731
        await until(pilot, lambda: all(r.server is not None and r.server.source == "otlp" for r in spans()), timeout=60)
        await pilot.press("x", "down", "down", "down", "down")
        await pilot.pause(1.0)
        svg = app.save_screenshot(filename=f"xray-vllm-c8-{size[0]}x{size[1]}.svg", path=HERE)
        await pilot.press("escape", "q")
    return to_png(svg, size)


def xray_pictures(tmp: str) -> list[str]:
    from pathlib import Path

    from tests.helpers.vllm import VLLM_PYTHON, free_port, vllm_server
    from tui_app.commands.report import build

    if not VLLM_PYTHON:
        print("no X-ray pictures: they need the real vLLM (TOKENTOP_VLLM_PYTHON, as `make test` sets it)", file=sys.stderr)
        return []
    address = f"127.0.0.1:{free_port()}"
    env = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "500"}
    flags = ("--max-num-seqs", "4", "--otlp-traces-endpoint", f"http://{address}/v1/traces")
    with vllm_server(Path(tmp) / "vllm.log", *flags, env=env) as url:
        out = [asyncio.run(shoot_xray(url, address, (160, 45)))]
        stem = os.path.join(tmp, "serving")
        bench = [sys.executable, "-m", "tui_app", "bench", "--endpoint", url, "--label", "vLLM", "--otlp", address, "--lengths", "32:12"]
        subprocess.run([*bench, "--concurrency", "2,8", "--repeats", "2", "--warmup", "0", "-o", "json", "--out", stem], check=True, stdout=subprocess.DEVNULL)
    (timeline,) = build(stem + ".json").figures
    png = os.path.join(HERE, "report-timeline.png")
    timeline.fig.savefig(png, dpi=120, metadata={"Software": None})
    return [*out, png]


# The README's worked example (Benchmarking a server), on a llama.cpp server with one slot.
SWEEP = ("--lengths", "64:32", "--sweep", "0.2:1:0.2", "--slo", "ttft=1.5s", "--repeats", "3", "--requests", "6")


def headroom() -> str:
    from tui_app.commands.report import build

    server = LlamaServer("--slots", "1")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            stem = os.path.join(tmp, "sweep")
            bench = [sys.executable, "-m", "tui_app", "bench", "--endpoint", server.url, "--label", "llama.cpp", *SWEEP, "-o", "json", "--out", stem]
            subprocess.run(bench, check=False)  # its tables for the README; exit 1 where no step meets the SLO: drawn all the same
            figure = next(f for f in build(stem + ".json").figures if f.name == "headroom-0")
    finally:
        server.close()
    png = os.path.join(HERE, "report-headroom.png")
    figure.fig.savefig(png, dpi=120, metadata={"Software": None})
    return png


def pictures(run) -> list[str]:
    return [asyncio.run(shot) for shot in run]


# The pictures made alone by `make_screenshots.py NAME` (the model's runs, no browser), in the order the whole set makes them.
ALONE = {
    "main": lambda: pictures([*(shoot(size) for size in SIZES), *(shoot((160, 45), look) for look in ("ascii", "16-colours"))]),
    "leak": lambda: pictures(shoot_leak(size) for size in SIZES),
    "present": lambda: pictures([shoot_demo((80, 24), "present-light")]),
    "anatomy": lambda: pictures([shoot_anatomy((160, 45))]),
    "colours": lambda: pictures([shoot_colours((160, 45)), shoot_colours((160, 45), spec="draft"), shoot_colours((160, 45), "confidence")]),
    "ledger": lambda: pictures([shoot_ledger((160, 45))]),
    "experts": lambda: pictures([shoot_experts(size) for size in SIZES]),
    "mi300x": lambda: pictures([shoot_amd((160, 45))]),
    "thinking": lambda: pictures([shoot_thinking((160, 45))]),
    "batch": lambda: pictures([shoot_batch((160, 45))]),
    "script": lambda: pictures([shoot_script((160, 45))]),
    "fleet": lambda: pictures([shoot_fleet((160, 45))]),
    "headroom": lambda: [headroom()],
}


def main() -> int:
    if shutil.which("rsvg-convert") is None:
        print("rsvg-convert is missing: apt-get install librsvg2-bin", file=sys.stderr)
        return 2
    if len(sys.argv) == 2 and sys.argv[1] in ALONE:
        for png in ALONE[sys.argv[1]]():
            print("wrote", png)
        return 0
    if browser.unavailable():
        print(f"no browser pictures: {browser.unavailable()}", file=sys.stderr)
        return 2
    made = pictures([shoot_attach((160, 45)), shoot_demo((160, 45))])
    for name, make in ALONE.items():
        if name != "headroom":
            made += make()
    with tempfile.TemporaryDirectory() as tmp:
        made += xray_pictures(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        made += reports(tmp)
    made += [*served(), headroom()]
    for png in made:
        print("wrote", png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
