"""Here, with network: what travels to the GPU machine (its missing wheels, the default model's tokenizer, tmux)."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu_check import TOKENIZER, MiB
from benchmarks.gpu_check.models import save_tokenizer

# What tokentop imports that the lent machine's image lacks (docs/gpu.md), at the versions this venv holds.
CARRIED = (
    "textual",
    "textual-serve",
    "aiohttp-jinja2",
    "rich",
    "markdown-it-py",
    "mdurl",
    "linkify-it-py",
    "uc-micro-py",
    "platformdirs",
    "typing-extensions",
    "pygments",
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "sniffio",
    "certifi",
    "idna",
    "gguf",
    "pytest-asyncio",
    # The machine has transformers 5.17; the one tested here runs there too (its own requirements,
    # huggingface-hub, tokenizers and safetensors, are there at versions it takes; regex may be older).
    "transformers",
    "regex",
)
# tmux's libraries that a CUDA image may lack (libc, libm, libtinfo and libresolv it has).
TMUX_LIBS = ("libevent_core-2.1", "libutempter")
# The release built against the lent machine's torch 2.11 (torchao's compatibility table).
TORCHAO = "torchao==0.17.0"
CARRY_LIMIT = 64 * 2**20


def carry_tmux(dest: Path) -> None:
    """This machine's tmux and the libraries the lent machine's image lacks for it, behind a
    wrapper in dest/bin: the observer-overhead check draws the TUI in a real terminal."""
    found = shutil.which("tmux")
    if found is None:
        print("tmux: not on this machine, not carried (the observer-overhead check will say SKIP)")
        return
    folder = dest / "tmux"
    folder.mkdir(exist_ok=True)
    shutil.copy2(found, folder / "tmux")
    libs = subprocess.run(["ldd", found], capture_output=True, text=True, check=True).stdout
    for name in TMUX_LIBS:
        path = re.search(rf"{re.escape(name)}\S* => (\S+)", libs)
        if path:
            shutil.copy2(path.group(1), folder / Path(path.group(1)).name)
    wrapper = dest / "bin" / "tmux"
    wrapper.parent.mkdir(exist_ok=True)
    script = [
        "#!/bin/sh",
        'here="$(dirname "$(readlink -f "$0")")/../tmux"',
        'LD_LIBRARY_PATH="$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/tmux" "$@"',
    ]
    wrapper.write_text("\n".join(script) + "\n")
    wrapper.chmod(0o755)


def build_wheels(dest: Path, python_version: str = "3.12") -> int:
    """Here, with network: the wheels the lent machine lacks, and the default model's tokenizer."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = []
    for name in CARRIED:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            print(f"{name}: not in this venv, not carried (nothing here needs it)")
    platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", f"--python-version={python_version}", "--implementation=cp"]
    cmd += platforms
    subprocess.run([*cmd, "-d", str(dest), TORCHAO, *pins], check=True)
    save_tokenizer(dest / TOKENIZER)
    carry_tmux(dest)
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(f"{dest}: {len(list(dest.glob('*.whl')))} wheels and the tokenizer, {size / MiB:.1f} MiB of the {CARRY_LIMIT // MiB} MiB that travel")
    return 0 if size <= CARRY_LIMIT else 1
