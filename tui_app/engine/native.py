"""tokentop's own C++ kernels: compiled on first use for this machine, cached, loaded as torch ops.

Built like inductor builds its kernels (the same compiler, for the CPU at hand: `-march=native`,
`-mcpu=native` on ARM), so a machine that can run the compile lever can build these too. Each
kernel has three bodies (kernels/isa.h): AVX-512 VNNI's, AVX2's, and a generic one in plain C++
vectors for every other CPU (ARM's NEON and SVE among them). TOKENTOP_CPU_KERNELS picks:
`best` (the default) what the CPU has; `portable` builds without AVX-512, as a CPU without it
would; `generic` the plain body. So one machine tests every body. Where the build fails, the
reason is kept and the callers fall back to plain torch (slower, same numbers to rounding).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
from pathlib import Path

import torch

from tui_app.folders import cache_root

SOURCES = Path(__file__).parent / "kernels"
MODES = ("best", "portable", "generic")
# Apple's clang has no -fopenmp: there ATen's parallel_for runs the kernels on one thread.
COMMON = ["-O3", *([] if platform.system() == "Darwin" else ["-fopenmp"]), "-shared", "-fPIC", "-std=c++20", "-w"]
X86 = ("x86_64", "amd64")
ARM = ("aarch64", "arm64")

_loaded: dict[str, str | None] = {}  # kernel name -> None when loaded, else why it is not


def mode() -> str:
    """TOKENTOP_CPU_KERNELS: 'best' (unset or empty too), 'portable' or 'generic'; anything else is
    returned as given, and load() refuses it with the reason."""
    return os.environ.get("TOKENTOP_CPU_KERNELS", "").strip().lower() or "best"


def flags(kernel_mode: str | None = None, machine: str | None = None) -> list[str]:
    """The compiler's flags for this machine's CPU (or `machine`'s own) in `kernel_mode` (by default mode())."""
    machine = (machine or platform.machine()).lower()
    target = ["-march=native"] if machine in X86 else ["-mcpu=native"] if machine in ARM else []
    chosen = kernel_mode or mode()
    if chosen in ("portable", "generic"):
        target += [f"-DTOKENTOP_{chosen.upper()}", *(["-mno-avx512f"] if machine in X86 else [])]
    return [*COMMON, *target]


@functools.cache
def isa(kernel_mode: str | None = None) -> str:
    """Which body the kernels compile to here, read off the compiler's own macros for these flags:
    'AVX-512 VNNI', 'AVX2', or the generic body's target: 'generic (SVE)', 'generic (NEON)',
    'generic (AVX2)' or 'generic' (plain C++, vectorized as the compiler can)."""
    compiler = os.environ.get("CXX", "g++")
    cmd = [compiler, *[f for f in flags(kernel_mode) if f.startswith(("-m", "-D"))], "-std=c++20", "-dM", "-E", "-x", "c++", os.devnull]
    try:
        macros = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        macros = ""
    defined = {line.split()[1] for line in macros.splitlines() if line.startswith("#define ")}
    forced = {"TOKENTOP_PORTABLE", "TOKENTOP_GENERIC"} & defined
    if not forced and {"__AVX512F__", "__AVX512VNNI__", "__AVX512BW__", "__AVX512VL__", "__AVX512DQ__"} <= defined:
        return "AVX-512 VNNI"
    if "TOKENTOP_GENERIC" not in defined and {"__AVX2__", "__FMA__", "__F16C__"} <= defined:
        return "AVX2"
    target = next((name for macro, name in (("__ARM_FEATURE_SVE", "SVE"), ("__ARM_NEON", "NEON"), ("__AVX2__", "AVX2")) if macro in defined), None)
    return f"generic ({target})" if target else "generic"


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:  # no /proc (macOS): the machine's name keys the build instead
        return f"{platform.machine()} {platform.processor()}"


def key_compiles_to_this_cpu() -> str:
    """Put this CPU into the key of inductor's caches (torch.compile's graphs); returns the tag.

    torch 2.13 keys a CPU graph in its FX graph cache by neither the CPU nor the vector ISA it was
    generated for, while the C++ it holds is built again for the ISA picked at load: a graph cached
    on an AVX-512 CPU, loaded where AVX2 is picked, ran 16-lane loops over 8-lane vectors and gave
    wrong numbers, silently (2026-12-01, the Intel Xeon, ATEN_CPU_CAPABILITY=avx2: every compiled
    lever's tokens). A cache meets another CPU wherever it travels: a VM restored on another host
    (this project's machines move between AVX-512 and AVX2 hosts), an image, a shared home. The
    tag is what picks the code, as our kernels' own key: the CPU's flags and ATEN_CPU_CAPABILITY."""
    import torch.compiler.config as compiler_config

    cpu = hashlib.sha256(f"{_cpu_flags()}\0{os.environ.get('ATEN_CPU_CAPABILITY', '')}".encode()).hexdigest()[:12]
    tag = f"tokentop-cpu-{cpu}"
    # The user's own tag stays; one of ours from another CPU cannot be there (a process's CPU is one).
    if tag not in compiler_config.cache_key_tag.split(","):
        compiler_config.cache_key_tag = ",".join(t for t in (compiler_config.cache_key_tag, tag) if t)
    return tag


def command(name: str, out: Path, compiler: str, includes: list[str], libs: list[str], abi: int, machine: str | None = None) -> list[str]:
    """The compile and link of kernel `name` into `out`, against a torch's headers and libraries."""
    source = [*(f"-I{p}" for p in includes), str(SOURCES / f"{name}.cpp"), "-o", str(out)]
    libraries = [*(f"-L{p}" for p in libs), *(f"-Wl,-rpath,{p}" for p in libs), "-lc10", "-ltorch_cpu"]
    return [compiler, *flags(machine=machine), f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *source, *libraries]


def _build(name: str) -> Path:
    from torch.utils import cpp_extension

    compiler = os.environ.get("CXX", "g++")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    texts = [p.read_text() for p in [SOURCES / f"{name}.cpp", *sorted(SOURCES.glob("*.h"))]]
    key = hashlib.sha256("\0".join([*texts, torch.__version__, compiler, str(abi), *flags(), _cpu_flags()]).encode()).hexdigest()[:16]
    target = cache_root() / "kernels" / f"{name}-{mode()}-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    cmd = command(name, tmp, compiler, cpp_extension.include_paths(), cpp_extension.library_paths(), abi)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{compiler} could not run ({exc})") from None
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"{compiler} failed: {last[:200]}")
    os.replace(tmp, target)  # atomic: a concurrent build of the same key writes the same bytes
    # Builds of older sources or another torch go; the other mode's stays (make test runs both).
    others = tuple(f"{name}-{m}-" for m in MODES if m != mode())
    for stale in target.parent.glob(f"{name}-*.so"):
        if stale != target and not stale.name.startswith(others):
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
        if mode() not in MODES:
            _loaded[name] = f"TOKENTOP_CPU_KERNELS={mode()} is not one of {', '.join(MODES)}"
            return _loaded[name]
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


def cross_build(argv: list[str] | None = None) -> int:
    """Every kernel built for another machine against its own torch, a wheel unpacked in a folder
    (make test-aarch64: for aarch64, against that wheel's headers and libtorch_cpu, with the cross
    compiler); one line each, and 1 if any failed."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tui_app.engine.native", description=cross_build.__doc__)
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--machine", required=True, help="as platform.machine() names it there, e.g. aarch64")
    ap.add_argument("--torch", required=True, help="the unpacked wheel's torch/ folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--abi", type=int, default=1, help="_GLIBCXX_USE_CXX11_ABI of that torch (PyPI's wheels: 1)")
    args = ap.parse_args(argv)
    root, out = Path(args.torch), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    includes = [str(root / "include"), str(root / "include" / "torch" / "csrc" / "api" / "include")]
    failed = 0
    for name in (p.stem for p in sorted(SOURCES.glob("*.cpp"))):
        # --no-undefined: every symbol found in that torch's libraries, as a load there would need
        cmd = [*command(name, out / f"{name}.so", args.compiler, includes, [str(root / "lib")], args.abi, args.machine), "-Wl,--no-undefined"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        failed += done.returncode != 0
        print(f"{name}: " + ("built" if done.returncode == 0 else f"failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:300]}"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(cross_build())
