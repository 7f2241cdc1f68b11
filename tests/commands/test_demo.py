"""`tokentop demo`: the default tour end to end on the real model (each step's levers applied, each
effect measured from the Session's rows with the right sign), a script using every field, bad
scripts refused in one line, and the tour's keys in the TUI."""

import math

import pytest

from monitors.events import Levers, RunStarted
from tests.ui.test_app import until
from tui_app.cli import main
from tui_app.commands.demo import run_tour
from tui_app.commands.run import engine_source
from tui_app.core.session import Session
from tui_app.core.tour import LEVERS, Figures, StepResult, TourError, default_tour, fitting, load_tour, parse_tour, ratio, speedups
from tui_app.engine.config import EngineConfig
from tui_app.ui.demo_app import DemoApp

TOKENS = 8


@pytest.fixture
def session_on(plain):
    """The shared engine feeding a fresh Session, as the headless demo wires it."""
    session, emit = Session(), plain.emit
    plain.emit = session.feed
    yield plain, session
    plain.emit = emit


@pytest.mark.serial
@pytest.mark.kernels
def test_the_default_tour_headless_states_each_effect_with_the_right_sign(session_on):
    engine, session = session_on
    said: list[str] = []
    steps = default_tour(tokens=TOKENS, seconds=0)
    log = run_tour(engine, session, steps, say=said.append)
    assert said[0] == fitting(steps, thinks=False)[1]  # the default model neither thinks nor routes to experts
    assert said[0].startswith("left out thinking, budget: the model has no think span; left out experts:")
    steps = fitting(steps, thinks=False)[0]
    res = log.results
    assert list(res) == [s.label for s in steps]
    for step in steps:
        r, f = res[step.label], res[step.label].figures
        assert not r.refused and f is not None, r.effect()
        assert f.levers == step.levers.label() and f.runs == step.runs
        # The runs table's numbers: each figure is the mean of the session's rows for the step's runs.
        rows = [session.timer.runs[i].total for i in r.run_ids]
        assert f.tok_s == pytest.approx(sum(s.decode_tps for s in rows) / len(rows))
        assert all(s.n_tokens == TOKENS for s in rows)
        assert f"[{steps.index(step) + 1}/{len(steps)}] {step.label}: {step.caption}" in said
        assert "    → " + r.effect() in said
        if r.base is not None and "tok/s" in step.watch:
            assert f"{ratio(f.tok_s, r.base.tok_s):.1f}× {step.compare} tok/s" in r.effect()

    def fig(label):
        return res[label].figures

    # Without the cache every step is a prefill of the whole (367-token) context.
    assert fig("no-cache").itl_s > 3 * fig("plain").itl_s
    assert "ITL p50" in res["no-cache"].effect() and f"{ratio(fig('no-cache').itl_s, fig('plain').itl_s):.2f}× plain's" in res["no-cache"].effect()
    assert fig("cache").tok_s > fig("no-cache").tok_s
    assert fig("short").ttft_s < fig("cache").ttft_s and fig("short").prompt_tokens < 100 < fig("cache").prompt_tokens
    for quant in ("int8", "int4"):
        assert fig(quant).tok_s > fig("plain").tok_s, res[quant].effect()
        assert f"ppl {fig(quant).perplexity:.2f} vs {fig('plain').perplexity:.2f}" in res[quant].effect()
    assert fig("lookup").accept > 0.5, res["lookup"].effect()
    assert f"{fig('lookup').accept * 100:.0f}% of proposed tokens accepted" in res["lookup"].effect()
    assert math.isnan(fig("plain").accept)
    summary = log.summary()
    assert len(summary) == 1 + len(steps) and summary[1].split()[:2] == ["plain", "cache"] and " 1.00× " in summary[1]
    assert said[-len(summary) :] == summary


SCRIPT = """
[[step]]
label = "base"
caption = "the baseline"
preset = "short"
tokens = 4
runs = 2
watch = "tok/s"

[[step]]
label = "mine"
caption = "int8 on two sequences, my own prompt"
prompt = "Name three rivers in Europe."
levers = { cache = true, compile = false, quant = "int8", spec = "off", batch = 2 }
tokens = 3
runs = 1
seconds = 2.5
compare = "base"
watch = ["tok/s", "itl", "ttft"]
"""


def test_a_script_with_every_field(session_on, tmp_path):
    engine, session = session_on
    path = tmp_path / "tour.toml"
    path.write_text(SCRIPT)
    steps = load_tour(str(path))
    base, mine = steps
    assert (base.preset, base.tokens, base.runs, base.compare, base.watch, base.seconds) == ("short", 4, 2, None, ("tok/s",), 0.0)
    assert (mine.prompt, mine.levers.quant, mine.levers.batch, mine.seconds, mine.compare) == ("Name three rivers in Europe.", "int8", 2, 2.5, "base")
    started: list[RunStarted] = []
    session.listeners.append(lambda ev: started.append(ev) if isinstance(ev, RunStarted) else None)
    log = run_tour(engine, session, steps, say=lambda line: None)
    assert [ev.preset for ev in started] == ["short", "short", "custom"]
    assert "Name three rivers in Europe." in started[-1].prompt_text and started[-1].levers.batch == 2
    assert log.results["base"].figures.runs == 2 and log.results["mine"].figures.runs == 1
    effect = log.results["mine"].effect()
    assert effect.startswith("mine: ") and "× base tok/s" in effect and "ITL p50" in effect and "TTFT" in effect
    assert "ppl" in effect  # int8 against fp weights: what it costs stated beside the speed
    assert load_tour(str(path), tokens=5, seconds=0)[1].tokens == 5


@pytest.mark.parametrize(
    "body,message",
    [
        ('[[step]]\ncaption="a"\n[[step]]\nlabel="x"\ncaption="b"\nlevers={turbo=true}', "step 2 (x): levers.turbo: unknown lever"),
        ('[[step]]\ncaption="a"\ntokens=-5', "step 1: tokens must be a whole number, 1 or more (got -5)"),
        ('[[step]]\ncaption="a"\nseconds=-1.5', "step 1: seconds must be a number, 0 or more (got -1.5)"),
        ('[[step]]\nlabel="x"\npreset="short"', "step 1 (x): caption is missing"),
        ('[[step]]\nlabel="a"\ncaption="a"\n[[step]]\ncaption="b"\ncompare="later"', "step 2: compare = 'later' is not an earlier step's label (a)"),
        ('[[step]]\ncaption="a"\nlevers={quant="int3"}', "step 1: levers.quant = 'int3': expected one of off, int8, int4"),
        ('[[step]]\ncaption="a"\ncolour="red"', "step 1: unknown field 'colour'"),
        ('[[step]]\ncaption="a"\nwatch="vibes"', "step 1: watch must be one or more of tok/s, itl, ttft, ttfa, accept"),
        ('[[step]]\ncaption="a"\neos="yes"', "step 1: eos must be true or false (got 'yes')"),
        ("[[step]\ncaption=", "not TOML"),
        ("title = 'x'", "unknown top-level key 'title'"),
    ],
)
def test_a_bad_script_is_one_line_naming_the_step_and_field(tmp_path, capsys, body, message):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    assert main(["demo", str(path), "--no-tui"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("tokentop: ")


def test_demo_no_tui_prints_captions_effects_and_a_refusal(tmp_path, capsys):
    path = tmp_path / "tour.toml"
    path.write_text(
        '[[step]]\nlabel="a"\ncaption="plain, two tokens"\npreset="short"\ntokens=2\n'
        '[[step]]\nlabel="b"\ncaption="compile without the cache"\nlevers={cache=false, compile=true}\ntokens=2\ncompare="a"\n'
    )
    record = tmp_path / "tour.jsonl"
    assert main(["demo", str(path), "--no-tui", "--record", str(record)]) == 1  # a refused step fails the check
    out = capsys.readouterr().out.splitlines()
    assert "[1/2] a: plain, two tokens" in out and "[2/2] b: compile without the cache" in out
    assert any(line.startswith("    → a: tok/s ") for line in out)
    assert any(line.startswith("    → b: refused: compile: ") and "cache" in line for line in out)
    assert out[-2].split()[:2] == ["a", "cache"] and out[-1].split() == ["b", "refused"]
    assert record.stat().st_size > 0


def test_the_leak_scene_of_docs_demo_md_catches_the_leak_made_on_purpose(tmp_path, capsys):
    """docs/demo.md's leak scene, its script as the page gives it: with --demo-leak 1 the step's
    effect is the detector's verdict, suspected at about 1 MB a run; without it, none."""
    import pathlib
    import re

    page = (pathlib.Path(__file__).parents[2] / "docs" / "demo.md").read_text()
    (script,) = re.findall(r"## A leak scene.*?```toml\n(.*?)```", page, re.S)
    path = tmp_path / "leak.toml"
    path.write_text(script)
    assert main(["demo", str(path), "--demo-leak", "1", "--no-tui", "--no-record"]) == 0
    (effect,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("    → baseline: ")]
    assert effect.startswith("    → baseline: leak suspected (+1.0") and effect.endswith("14 runs)"), effect
    assert main(["demo", str(path), "--no-tui", "--no-record"]) == 0
    (effect,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("    → baseline: ")]
    assert effect.startswith("    → baseline: no leak ("), effect


def test_demo_report_is_the_tours_recording_as_a_report(tmp_path, capsys):
    path = tmp_path / "tour.toml"
    path.write_text('[[step]]\nlabel="a"\ncaption="plain"\ntokens=3\n[[step]]\nlabel="b"\ncaption="int8"\nlevers={quant="int8"}\ntokens=3\ncompare="a"\n')
    report = tmp_path / "tour.html"
    assert main(["demo", str(path), "--no-tui", "--report", str(report), "--record", str(tmp_path / "tour.jsonl")]) == 0
    assert f"wrote {report}" in capsys.readouterr().err
    page = report.read_text()
    assert page.count("<svg") == 5 and "cache int8" in page  # every session figure, and the runs table's levers


@pytest.mark.parametrize(
    "extra,message",
    [(["--no-record"], "--report is made from the tour's recording: leave out --no-record"), ([], "--report /proc/r.html: cannot write it")],
)
def test_demo_report_refuses_before_the_tour(tmp_path, capsys, extra, message):
    target = str(tmp_path / "r.html") if extra else "/proc/r.html"
    assert main(["demo", "--no-tui", "--report", target, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def _figures(label: str, tok_s: float, quant: str = "off") -> Figures:
    return Figures(label, quant, 1, 300, tok_s, 0.1, 1 / tok_s, math.nan, math.nan, math.nan, 24.6, quant)


def test_a_lever_that_does_not_pay_here_is_said_so_with_its_figure_and_the_engines_reason():
    """A step that turns a speed lever on and decodes slower than the step it compares with says
    so, beside the figure, with what the engine said it built instead; one that pays says nothing
    more, nor does a step that turns no speed lever on (a shorter prompt, a batch)."""
    plain, int8 = (next(s for s in default_tour() if s.label == label) for label in ("plain", "int8"))
    note = "int8 without its C++ kernel, every weight widened (slower): g++ could not run"
    slow = StepResult(int8, [2], [], _figures("int8", 3.7, "int8"), _figures("plain", 9.2), plain.levers, note)
    assert slow.pays() is False
    assert slow.effect() == f"int8: 0.4× plain tok/s (3.7 vs 9.2), int8 does not pay on this machine ({note}), ppl 24.60 vs 24.60"
    fast = StepResult(int8, [2], [], _figures("int8", 30.1, "int8"), _figures("plain", 9.2), plain.levers)
    assert fast.pays() is True and "does not pay" not in fast.effect()
    batch = next(s for s in default_tour() if s.label == "batch4")
    assert StepResult(batch, [3], [], _figures("batch4", 5.0), _figures("cache", 9.2), plain.levers).pays() is None
    assert speedups(Levers(compile=True, quant="int4"), Levers(quant="int4")) == ["compile"]


def test_parse_tour_needs_steps():
    with pytest.raises(TourError, match="no steps"):
        parse_tour({})
    assert set(LEVERS) <= set(default_tour()[0].levers.__dataclass_fields__)


PILOT_TOUR = """
[[step]]
label = "plain"
caption = "watch the plain run"
preset = "short"
tokens = 6
seconds = 600

[[step]]
label = "int8"
caption = "watch int8"
preset = "short"
levers = { quant = "int8" }
tokens = 6
seconds = 600
compare = "plain"
"""


async def test_the_tour_keys_move_pause_and_leave_the_script(tmp_path):
    path = tmp_path / "tour.toml"
    path.write_text(PILOT_TOUR)
    app = DemoApp(load_tour(str(path)), engine_source(EngineConfig()), fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: "plain" in app.tour_log.results, timeout=120, what="step 1 measured")
        text = app.banner.text()
        assert "step 1/2: plain" in text and "watch the plain run" in text and text.splitlines()[2].startswith("plain: tok/s ")
        await pilot.pause(0.5)
        assert app.step_index == 0, "a step holds for its seconds"

        await pilot.press("right")
        await until(pilot, lambda: "int8" in app.tour_log.results, timeout=120, what="step 2 measured")
        assert app.session.levers.quant == "int8" and app.banner.text().splitlines()[2].startswith("int8: ")
        assert "× plain tok/s" in app.tour_log.results["int8"].effect()

        await pilot.press("left")
        await until(pilot, lambda: app.step_index == 0 and app.session.levers.quant == "off", timeout=120, what="back to step 1")

        await pilot.press("space")  # pauses the tour, not the generation
        assert app.tour_paused and not app.paused and "tour paused" in app.banner.text()
        await pilot.press("space")
        assert not app.tour_paused

        await pilot.press("w")  # a lever key: off the script
        await until(pilot, lambda: app.session.levers.quant == "int8", timeout=120, what="the lever key works")
        assert app.off_script and "off script" in app.banner.text()
        await pilot.press("right")
        await until(pilot, lambda: app.step_index == 1 and not app.off_script, timeout=120, what="→ back on the script")

        await pilot.press("right")  # past the last step: the summary table
        await until(pilot, lambda: app.tour_done, timeout=120, what="the tour's end")
        text = app.banner.text()
        assert all(line in text for line in app.tour_log.summary()) and "1.00×" in text
        await pilot.press("q")


async def test_a_paused_tour_holds_its_step_and_goes_on_by_itself_when_resumed(tmp_path):
    steps = parse_tour(
        {
            "step": [
                {"label": "a", "caption": "one", "preset": "short", "tokens": 4},
                {"label": "think", "caption": "for a thinking model", "thinking": True},
                {"label": "b", "caption": "two", "preset": "short", "tokens": 4},
            ]
        }
    )
    app = DemoApp(steps, engine_source(EngineConfig()), fps=8, out_dir=str(tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space")
        await until(pilot, lambda: "a" in app.tour_log.results, timeout=120, what="step a measured")
        await pilot.pause(1.0)
        assert app.step_index == 0 and "tour paused" in app.banner.text()
        await pilot.press("space")
        await until(pilot, lambda: app.tour_done, timeout=120, what="the tour's end, with no key pressed")
        assert list(app.tour_log.results) == ["a", "b"] and app.banner.text().splitlines()[0] == "tour done: 2 of 2 steps measured"
        assert "left out think: the model has no think span" in app.told
        await pilot.press("q")


@pytest.mark.serial
def test_the_server_tour_headless_on_two_real_servers(llama_server, capsys):
    """`attach A B --demo --no-tui`: prompt length, streams, then the second server, each measured
    from its rows: the long prompt's TTFT above the short one's, the last step's run on server B."""
    from tests.helpers.llama_server import LlamaServer

    other = LlamaServer("--ctx", "2048")
    try:
        assert main(["attach", llama_server.url, other.url, "--label", "A", "--label", "B", "--demo", "--no-tui", "--no-record"]) == 0
    finally:
        other.close()
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "a tour of 4 steps on 2 servers" in lines
    long_effect = next(line for line in lines if line.startswith("    → long prompt: TTFT "))
    assert float(long_effect.split("TTFT ")[1].split("×")[0]) > 1
    table = lines[lines.index("") + 1 :]
    rows = {line.split()[0]: line for line in table[1:]}
    assert rows["one"].split()[2:4] == ["A", "c1"] and rows["4"].split()[2:4] == ["A", "c4"]
    assert rows["server"].split()[2:4] == ["B", "c1"]


async def test_the_server_tour_in_the_tui_sends_streams_and_servers(llama_server, tmp_path):
    from dataclasses import replace

    from tests.helpers.llama_server import LlamaServer
    from tui_app.attach.client import AttachConfig
    from tui_app.core.sources import AttachSource
    from tui_app.core.tour import server_tour

    other = LlamaServer("--ctx", "2048")
    steps = [replace(s, seconds=0.0) for s in server_tour(2, tokens=6)]
    source = AttachSource([AttachConfig(url=llama_server.url, label="A"), AttachConfig(url=other.url, label="B")])
    app = DemoApp(steps, source, fps=8, out_dir=str(tmp_path))
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: app.tour_done, timeout=180, what="the server tour's end")
            assert list(app.tour_log.results) == [s.label for s in steps]
            assert [app.tour_log.results[s.label].figures.levers for s in steps] == ["A c1", "A c1", "A c4", "B c1"]
            assert "step 4/4" not in app.banner.text() and "tour done: 4 of 4 steps measured" in app.banner.text()
            await pilot.press("q")
    finally:
        other.close()
