"""An MoE's routing as the engine counts it (tui_app/engine/routing.py), against the test's own
recount: a hook on each layer's router takes its logits, picks the top k itself and counts. Small
random-weight configs of each MoE family transformers runs, made here; the engine finds them by
module type, never by name."""

from __future__ import annotations

import itertools

import pytest
import torch

from monitors.events import RunFinished, Step
from monitors.host_reads import count_host_reads
from tests.helpers.tiny_models import COMMON, FAMILIES, E, K, moe_config, routers, save_moe
from tui_app.engine.config import EngineConfig
from tui_app.engine.generation import Engine
from tui_app.engine.routing import Routing
from tui_app.requests import RunRequest, SetLever

MOE_LAYERS = {"deepseekv3": 2}  # its first layer dense


@pytest.fixture(scope="module", params=FAMILIES)
def moe(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    save_moe(request.param, folder)
    events: list = []
    engine = Engine(EngineConfig(model=str(folder)), events.append)
    engine.load()
    engine.events, engine.family = events, request.param
    return engine


class Recount:
    """Each forward's top-k choices counted by the test from its routers' logits, on every weight
    variant the engine has (a quantized copy routes with its own routers)."""

    def __init__(self, models):
        self.calls: list[torch.Tensor] = []  # [layers, E] per forward
        self.handles = []
        for model in models:
            layers = routers(model)
            self.handles += [r.register_forward_hook(self._hook(i, len(layers))) for i, r in enumerate(layers)]
        self.layer_calls: list[torch.Tensor] = []

    def _hook(self, layer: int, layers: int):
        def hook(module, args, out):
            logits = out[0].reshape(-1, E).float()
            self.layer_calls.append(torch.bincount(logits.topk(K, dim=-1).indices.flatten(), minlength=E))
            if layer == layers - 1:
                self.calls.append(torch.stack(self.layer_calls))
                self.layer_calls = []

        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def run_counted(engine, req: RunRequest, poll=lambda: ()) -> tuple[RunFinished, list[Step], list[torch.Tensor]]:
    """The run, its steps, and the test's recount of each step's forwards."""
    recount = Recount(engine.control.variants.values())
    marks, emit = [], engine.emit

    def watch(ev):
        if isinstance(ev, Step):
            marks.append(len(recount.calls))
        emit(ev)

    engine.emit = watch
    first = len(recount.calls)
    try:
        done = engine.run(req, poll)
    finally:
        engine.emit, _ = emit, recount.close()
    steps = [e for e in engine.events if isinstance(e, Step) and e.run_id == done.run_id]
    bounds = [first, *marks]
    per_step = [sum(recount.calls[a:b], torch.zeros(engine.ready.routing["layers"], E, dtype=torch.long)) for a, b in itertools.pairwise(bounds)]
    return done, steps, per_step


def test_each_family_is_counted_as_its_routers_chose(moe):
    ready = moe.ready
    layers = MOE_LAYERS.get(moe.family, 3)
    assert ready.routing == {"layers": layers, "experts": E, "top_k": K, "shared": {"qwen2moe": 3, "deepseekv3": 2}.get(moe.family, 0)}, ready.routing
    req = RunRequest(preset="short", max_new_tokens=6, ignore_eos=True)
    done, steps, per_step = run_counted(moe, req)
    ours = torch.stack(per_step).sum(0)
    assert done.expert_counts == ours.tolist()
    positions = len(moe.prompt_ids(req)[0]) + done.n_tokens - 1  # the last token is never forwarded
    assert [sum(layer) for layer in done.expert_counts] == [positions * K] * layers
    assert [s.experts_hit for s in steps] == [int(torch.count_nonzero(c)) for c in per_step]
    assert steps[0].experts_hit > steps[-1].experts_hit  # the prompt's many positions reach more experts than one token


@pytest.mark.parametrize("moe", ["qwen3moe"], indirect=True)  # the union is the engine's, not a family's
def test_a_batch_of_distinct_prompts_reads_the_union_of_its_rows_experts(moe):
    req = RunRequest(preset="short", max_new_tokens=8, ignore_eos=True)
    _, alone, _ = run_counted(moe, req)
    assert moe.set_lever("batch", 4)
    try:
        done, steps, per_step = run_counted(moe, req)
    finally:
        moe.set_lever("batch", 1)
    assert done.expert_counts == torch.stack(per_step).sum(0).tolist()
    assert [s.experts_hit for s in steps] == [int(torch.count_nonzero(c)) for c in per_step]
    decode = [s.experts_hit for s in steps if s.kind == "decode"]
    one = [s.experts_hit for s in alone if s.kind == "decode"]
    assert sum(decode) / len(decode) > sum(one) / len(one)  # four rows' experts, not one's: the k/n figure's error
    assert all(h <= 3 * K for h in one) and all(h <= 3 * E for h in decode)


@pytest.mark.parametrize("moe", ["qwen3moe", "mixtral"], indirect=True)  # the experts tokentop quantizes itself (engine/experts.py)
def test_int8_experts_switched_mid_run_route_as_the_routers_chose(moe):
    assert moe.set_lever("quant", "int8") and moe.set_lever("quant", "off")  # made now, so the recount hooks its routers too
    sent = iter([[], [], [SetLever("quant", "int8")]])
    try:
        done, steps, per_step = run_counted(moe, RunRequest(preset="short", max_new_tokens=8, ignore_eos=True), lambda: next(sent, []))
        assert moe.levers.quant == "int8" and done.n_tokens == 8
        assert done.expert_counts == torch.stack(per_step).sum(0).tolist()
        assert [s.experts_hit for s in steps] == [int(torch.count_nonzero(c)) for c in per_step]
    finally:
        moe.set_lever("quant", "off")


@pytest.mark.parametrize("moe", ["qwen3moe"], indirect=True)
def test_a_compiled_step_counts_as_the_eager_one(moe):
    """The hooks run inside the compiled graph. The recount's own hooks would be traced into it
    too, so the compiled run is held to the eager run of the same text, which the recount holds."""
    req = RunRequest(preset="short", max_new_tokens=6, ignore_eos=True)
    eager, eager_steps, per_step = run_counted(moe, req)
    assert eager.expert_counts == torch.stack(per_step).sum(0).tolist()
    assert moe.set_lever("compile", True)
    try:
        compiled = moe.run(req)
    finally:
        moe.set_lever("compile", False)
    steps = [e for e in moe.events if isinstance(e, Step) and e.run_id == compiled.run_id]
    assert compiled.text == eager.text and compiled.expert_counts == eager.expert_counts
    assert [s.experts_hit for s in steps] == [s.experts_hit for s in eager_steps]


@pytest.mark.parametrize("moe", ["olmoe"], indirect=True)  # the read is the decoder's, not a family's
def test_routing_adds_no_host_read(moe):
    """transformers' own experts loop reads which experts were hit, layer by layer (its eager
    implementation); the counting adds nothing to that."""
    req = RunRequest(preset="short", max_new_tokens=6, ignore_eos=True)
    moe.run(req)
    reads = {}
    routing = moe.routing
    for counted in (True, False, True):
        moe.routing = routing if counted else None
        with count_host_reads() as n:
            done = moe.run(req)
        assert bool(done.expert_counts) == counted
        reads.setdefault(counted, set()).add(n.reads)
    moe.routing = routing
    assert reads[True] == reads[False] and len(reads[True]) == 1, reads


def test_a_router_of_an_unknown_kind_is_said_once_and_left_out():
    import transformers as tf

    cls, cfg = moe_config("qwen3moe")
    model = cls(cfg)
    for layer in model.model.layers:  # custom experts: the router's choices never reach an interface tokentop knows
        layer.mlp.experts = torch.nn.Identity()
    routing, note = Routing.of(model)
    assert routing is None and "does not count" in note
    assert Routing.of(tf.Qwen3ForCausalLM(tf.Qwen3Config(**COMMON, intermediate_size=96, num_hidden_layers=2, head_dim=16))) == (None, "")


def test_a_model_too_random_for_a_finite_perplexity_says_inf_and_runs_on(tmp_path):
    """exp(mean NLL) past a float's range (this MoE's logits scaled up until it is) is inf, not an OverflowError that ends the engine."""
    save_moe("qwen3moe", tmp_path)
    events: list = []
    engine = Engine(EngineConfig(model=str(tmp_path)), events.append)
    engine.load()
    with torch.no_grad():
        engine.model.lm_head.weight.mul_(1e4)
    done = engine.run(RunRequest(preset="short", max_new_tokens=2, ignore_eos=True))
    assert done.perplexity == float("inf") and done.stop_reason == "max tokens"


@pytest.mark.parametrize("moe", ["qwen3moe"], indirect=True)
def test_the_ledger_says_whether_int8_experts_route_as_plain(moe):
    """The same workload plain and with int8 experts, twice each: the ledger's verdict names
    whether int8 sent the positions to plain's experts, and where not, in how many layers."""
    from tui_app.core.ledger import entries
    from tui_app.core.session import Session

    req = RunRequest(preset="short", max_new_tokens=8, ignore_eos=True)
    start = len(moe.events)
    try:
        for quant in ("off", "off", "int8", "int8"):
            moe.set_lever("quant", quant)
            moe.run(req)
    finally:
        moe.set_lever("quant", "off")
    session = Session()
    for ev in [moe.ready, *moe.events[start:]]:
        session.feed(ev)
    (entry,) = entries(session)
    plain, int8 = [e for e in moe.events[start:] if isinstance(e, RunFinished)][1::2]
    differ = sum(a != b for a, b in zip(int8.expert_counts, plain.expert_counts, strict=True))
    said = "routes as plain" if not differ else f"routes otherwise in {differ} of 3 layers"
    assert entry.routing.startswith(said) and entry.verdict.endswith(entry.routing), entry


def test_experts_offloaded_to_disk_are_said_not_counted_and_the_run_goes_on(tmp_path):
    save_moe("qwen3moe", tmp_path)
    engine = Engine(EngineConfig(model=str(tmp_path), device_map="auto", max_memory={"cpu": "14MiB"}), lambda ev: None)
    ready = engine.load()
    assert "disk" in ready.placement and ready.routing is None and "offloaded" in ready.routing_note
    done = engine.run(RunRequest(preset="short", max_new_tokens=3, ignore_eos=True))
    assert done.stop_reason == "max tokens" and done.expert_counts is None


def test_the_anatomys_mlp_is_weighed_by_the_experts_its_steps_read(tmp_path):
    """The anatomy of an MoE's decode steps at batch 2: the roofline's expert count is the mean of
    the run's decode steps' distinct experts (their own counts, held against the routers above),
    and the MLP's line weighs those experts' bytes against the MLP's profiled time."""
    from tui_app.core.readings import mlp_experts
    from tui_app.core.session import Session
    from tui_app.requests import Probe, Profile

    save_moe("qwen3moe", tmp_path / "m")
    events: list = []
    engine = Engine(EngineConfig(model=str(tmp_path / "m")), events.append)
    engine.load()
    engine.command(SetLever("batch", 2))
    engine.command(Probe())
    engine.command(Profile(str(tmp_path / "trace.json"), 4))
    engine.run(RunRequest(prompt_ids=[5, 6, 7], max_new_tokens=16, ignore_eos=True))
    session = Session.from_events(list(events))
    (anatomy,) = session.anatomies.values()
    verdict = session.run_rooflines[anatomy.run_id]
    hits = [e.experts_hit for e in events if isinstance(e, Step) and e.kind == "decode" and e.run_id == anatomy.run_id]
    assert hits and verdict.experts == pytest.approx(sum(hits) / len(hits))
    routing, bw = engine.ready.routing, session.bandwidth
    line = mlp_experts(anatomy, verdict, bw, routing)
    read = verdict.experts * bw.expert_bytes
    total = routing["layers"] * routing["experts"]
    mlp_ms = anatomy.parts["mlp"]
    assert line.startswith(f"{anatomy.levers.label()}: the MLP's {mlp_ms:.2f} ms a step read {verdict.experts:.1f} of {total} experts ({read / 2**20:.1f} MiB;")
    assert f"at least {read / (mlp_ms / 1000) / 1e9:.2f} GB/s" in line and "of the m probe's" in line
    assert mlp_experts(anatomy, verdict._replace(experts=None), bw, routing) == ""  # a dense model's run: no line


def test_the_tours_moe_scene_shows_the_experts_a_step_reads_rise_with_the_batch(tmp_path):
    """The default tour's `experts` step (batch 4 on an MoE) against `cache` (batch 1): each step's
    figure is the mean of its last run's decode steps' distinct experts (the routing's counts,
    held against the routers above), one token's k a layer at batch 1, more at batch 4."""
    from tui_app.commands.demo import run_tour
    from tui_app.core.session import Session
    from tui_app.core.tour import default_tour

    save_moe("qwen3moe", tmp_path / "m")
    session, events = Session(), []
    session.listeners.append(events.append)
    engine = Engine(EngineConfig(model=str(tmp_path / "m")), session.feed)
    engine.load()
    said: list[str] = []
    steps = [s for s in default_tour(tokens=16, seconds=0) if s.label in ("cache", "experts")]
    log = run_tour(engine, session, steps, say=said.append)
    assert not any("left out" in line for line in said), said
    cache, experts = (log.results[label] for label in ("cache", "experts"))

    def mean_hits(result) -> float:
        hits = [e.experts_hit for e in events if isinstance(e, Step) and e.kind == "decode" and e.run_id == result.run_ids[-1]]
        return sum(hits) / len(hits)

    routing = engine.ready.routing
    assert cache.figures.experts == mean_hits(cache) == routing["layers"] * routing["top_k"]  # one token: k a layer
    x, c = experts.figures.experts, cache.figures.experts
    assert x == pytest.approx(mean_hits(experts)) and x > c
    assert experts.effect().startswith(f"experts: {x:.1f} experts a decode step read, {x / c:.2f}× cache's {c:.1f}, "), experts.effect()
