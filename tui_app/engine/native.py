"""tokentop's own C++ kernels: compiled on first use for this machine, cached, loaded as torch ops.

Built like inductor builds its kernels (the same compiler, for the CPU at hand: `-march=native`),
so a machine that can run the compile lever can build these too. Where the build fails, the reason
is kept and the callers fall back to plain torch (slower, same numbers to rounding).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import torch

from tui_app.folders import cache_root

SOURCES = Path(__file__).parent / "kernels"
FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++20", "-w"]

_loaded: dict[str, str | None] = {}  # kernel name -> None when loaded, else why it is not


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        return ""


def _build(name: str) -> Path:
    from torch.utils import cpp_extension

    source = SOURCES / f"{name}.cpp"
    compiler = os.environ.get("CXX", "g++")
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    texts = [p.read_text() for p in [source, *sorted(SOURCES.glob("*.h"))]]
    key = hashlib.sha256("\0".join([*texts, torch.__version__, compiler, abi, *FLAGS, _cpu_flags()]).encode()).hexdigest()[:16]
    target = cache_root() / "kernels" / f"{name}-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    libs = cpp_extension.library_paths()
    cmd = [
        compiler,
        *FLAGS,
        abi,
        *(f"-I{p}" for p in cpp_extension.include_paths()),
        str(source),
        "-o",
        str(tmp),
        *(f"-L{p}" for p in libs),
        *(f"-Wl,-rpath,{p}" for p in libs),
        "-lc10",
        "-ltorch_cpu",
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{compiler} could not run ({exc})") from None
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"{compiler} failed: {last[:200]}")
    os.replace(tmp, target)  # atomic: a concurrent build of the same key writes the same bytes
    for stale in target.parent.glob(f"{name}-*.so"):  # builds of older sources or another torch
        if stale != target:
            stale.unlink(missing_ok=True)  # a process that has one loaded keeps its mapping
    return target


def _fake_int8_linear(x, qweight, scale, out_features, bias):
    # The output's shape, for torch.compile's tracing: x's, with the last size the layer's outputs.
    return x.new_empty((*x.shape[:-1], out_features))


def _fake_int4_linear(x, packed, out_features, bias):
    return x.new_empty((*x.shape[:-1], out_features))


def _fake_decode_attention(q, k, v, position, scale):
    return q.new_empty((q.shape[0], 1, q.shape[1], q.shape[3]))


FAKES = {
    "int8_linear": ("tokentop::int8_linear", _fake_int8_linear),
    "int4_linear": ("tokentop::int4_linear", _fake_int4_linear),
    "decode_attention": ("tokentop::decode_attention", _fake_decode_attention),
}
# decode_step has none: it is never traced, the engine calls it as the compiled step itself.


def load(name: str) -> str | None:
    """Load kernel `name` (building it once per machine); None when it is ready, else the reason."""
    if name not in _loaded:
        try:
            torch.ops.load_library(str(_build(name)))
        except (RuntimeError, OSError) as exc:
            _loaded[name] = str(exc)
        else:
            if name in FAKES:
                op, fake = FAKES[name]
                torch.library.register_fake(op)(fake)
            _loaded[name] = None
    return _loaded[name]
