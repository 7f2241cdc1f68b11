"""engine/native.py: which body of the kernels each kind of CPU builds (kernels/isa.h), that the
machine's best is chosen, that each body compiles, and the build cache. What the kernels compute is
tests/engine/test_quant.py's, test_attention.py's and test_decode_step.py's."""

import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from tui_app.engine import native
from tui_app.engine.levers import quant_note
from tui_app.engine.quant import int8_weights


def test_a_kernel_is_built_once_into_the_cache_and_replaces_older_builds(monkeypatch, tmp_path):
    """An older build of the same mode goes; another mode's stays, as make test runs both in turn."""
    monkeypatch.setenv("TOKENTOP_CACHE", str(tmp_path))
    other = next(m for m in native.MODES if m != native.mode())
    stale, kept = (tmp_path / "kernels" / f"int8_linear-{m}-0123456789abcdef.so" for m in (native.mode(), other))
    stale.parent.mkdir()
    for path in (stale, kept):
        path.write_bytes(b"an older build")
    built = native._build("int8_linear")
    assert built.parent == stale.parent and built.exists() and not stale.exists() and kept.exists()
    mtime = built.stat().st_mtime_ns
    assert native._build("int8_linear") == built and built.stat().st_mtime_ns == mtime  # cached
    assert sorted(p.name for p in built.parent.iterdir()) == sorted([built.name, kept.name])  # no temporary left


# What isa.h picks for each kind of CPU this host's compiler targets (an x86 compiler builds for any
# x86, an ARM one for any ARM): Skylake-X has AVX-512 without VNNI, so it takes the AVX2 body.
BODIES = {
    "x86_64": [
        ("-march=icelake-server", "TOKENTOP_VNNI"),
        ("-march=skylake-avx512", "TOKENTOP_AVX2"),
        ("-march=znver2", "TOKENTOP_AVX2"),
        ("-march=x86-64", "generic"),
        ("-march=icelake-server -DTOKENTOP_PORTABLE -mno-avx512f", "TOKENTOP_AVX2"),
        ("-march=icelake-server -DTOKENTOP_GENERIC", "generic"),
    ],
    "aarch64": [("-mcpu=neoverse-v1", "generic"), ("-mcpu=cortex-a72", "generic")],
}


def _compile(flags: list[str], *args: str) -> subprocess.CompletedProcess:
    from torch.utils import cpp_extension

    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    return subprocess.run([os.environ.get("CXX", "g++"), *flags, "-std=c++20", "-w", *includes, *args], capture_output=True, text=True, check=False)


@pytest.mark.parametrize(("flags", "body"), BODIES.get(platform.machine(), []))
def test_each_kind_of_cpu_gets_its_body(flags, body):
    macros = _compile(flags.split(), "-dM", "-E", "-x", "c++", str(native.SOURCES / "isa.h")).stdout
    assert next((b for b in ("TOKENTOP_VNNI", "TOKENTOP_AVX2") if f"#define {b} " in macros), "generic") == body


@pytest.mark.parametrize("flags", ["-march=icelake-server", "-march=x86-64-v3", "-march=x86-64"] if platform.machine() == "x86_64" else ["-mcpu=cortex-a72"])
def test_the_fused_step_builds_for_each_body(flags):
    """decode_step.cpp includes every kernel's body (int8.h, int4.h, attention.h): built for a CPU
    of each kind, with no AVX-512, no AVX2 or no F16C, it must still compile."""
    done = _compile([flags], "-fsyntax-only", str(native.SOURCES / "decode_step.cpp"))
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_best_body_is_the_cpus_own():
    """What this machine's CPU says it has (/proc/cpuinfo, where there is one) decides the body:
    VNNI's with AVX-512 VNNI, AVX2's with AVX2, FMA and F16C, else the generic one."""
    flags = set(native._cpu_flags().split())
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"} <= flags:
        expected = "AVX-512 VNNI"
    elif {"avx2", "fma", "f16c"} <= flags:
        expected = "AVX2"
    else:
        expected = "generic"
    assert native.isa("best").split(" (")[0] == expected
    assert native.isa("portable").split(" (")[0] == ("AVX2" if expected != "generic" else "generic")
    assert native.isa("generic").startswith("generic")


def test_an_unknown_kernel_choice_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv("TOKENTOP_CPU_KERNELS", "fastest")
    assert native.load("int8_linear") == "TOKENTOP_CPU_KERNELS=fastest is not one of best, portable, generic"
    model = int8_weights(torch.nn.Sequential(torch.nn.Linear(64, 10)))
    assert quant_note("int8", "cpu", model).startswith("int8 without its C++ kernel, every weight widened (slower): TOKENTOP_CPU_KERNELS=fastest")


# One graph compiled by a process of its own: its cache folder shared, the vector ISA inductor picks
# (ATEN_CPU_CAPABILITY) not. Without the CPU in the key, the second read the first's graph: NaNs
# where AVX2 was picked after AVX-512, a C++ error where no vector ISA was (2026-12-01).
COMPILED = """
import sys, torch
from tui_app.engine import native
print(native.key_compiles_to_this_cpu())
x = torch.linspace(-3, 3, 1000)
f = lambda x: torch.sin(x) * 3 + x
print((torch.compile(f, dynamic=False)(x) - f(x)).abs().max().item())
"""


@pytest.mark.slow
def test_a_compile_cached_for_another_cpu_is_not_reused():
    """inductor's cache, warmed where it picks this CPU's best vectors, then read where it picks
    none ("default": every CPU has a best that differs from it but the rare one without vectors).
    The folder outlives the run, as a user's cache does: built once a machine (a cold pair is
    30-60 s of the C++ compiler), the test still fails where the CPU is not in the key, since both
    processes then look up one entry, whichever wrote it first."""
    folder = Path(tempfile.gettempdir()) / "tokentop-tests-inductor-isa"
    outs = []
    for capability in (None, "default"):
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(folder), "OMP_NUM_THREADS": "1"}
        env.pop("ATEN_CPU_CAPABILITY", None)
        env.update({"ATEN_CPU_CAPABILITY": capability} if capability else {})
        r = subprocess.run([sys.executable, "-c", COMPILED], capture_output=True, text=True, env=env, timeout=300, check=False)
        assert r.returncode == 0, r.stderr[-3000:]
        tag, diff = r.stdout.split()[-2:]
        outs.append(tag)
        assert float(diff) < 1e-5, f"ATEN_CPU_CAPABILITY={capability}: compiled ≠ eager by {diff}"
    assert outs[0] != outs[1] and all(t.startswith("tokentop-cpu-") for t in outs)
