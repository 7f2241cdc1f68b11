"""What `pip install tokentop` costs a user: the wheel of this checkout installed into a fresh venv,
time and size, as a user gets it (dependencies resolved by pip, newest releases), with pip's cache
empty (everything downloaded from PyPI) and again with it filled. Each form: the base install
(attach, fleet, bench --endpoint, replay, serve), base + [report] (matplotlib), and with --engine
also [engine] (torch and the rest: large).

Size is the whole venv folder, its own pip included. Targets for the base: ≤ 30 s and ≤ 80 MB.

    .venv/bin/python benchmarks/serving/install.py [--engine] [--python python3.11]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import ROOT


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def build_wheel(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), ROOT], cwd=out, check=True, capture_output=True)
    shutil.rmtree(os.path.join(ROOT, "build"), ignore_errors=True)
    return next(out.glob("tokentop-*.whl"))


def install(python: str, target: str, cache: Path, work: Path) -> tuple[float, float, int, dict]:
    """Seconds to make the venv, seconds to install into it, its size, and the versions it got."""
    venv = work / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    env = {**os.environ, "PIP_CACHE_DIR": str(cache), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    t0 = time.perf_counter()
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    t1 = time.perf_counter()
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", target], check=True, env=env, cwd=work, capture_output=True)
    t2 = time.perf_counter()
    freeze = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True).stdout
    versions = dict(line.split("==", 1) for line in freeze.splitlines() if "==" in line)
    return t1 - t0, t2 - t1, folder_bytes(venv), versions


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", action="store_true", help="also measure [engine] (torch and the rest)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that makes the venvs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tokentop-install-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(work)
        forms = [("base", str(wheel)), ("base + [report]", f"{wheel}[report]")]
        if args.engine:
            forms.append(("base + [engine]", f"{wheel}[engine]"))
        rows = []
        for label, target in forms:
            cache = work / f"cache-{len(rows)}"
            cold = install(args.python, target, cache, work)
            warm = install(args.python, target, cache, work)
            rows.append((label, cold, warm))
        empty = install(args.python, "pip", work / "cache-empty", work)  # a venv with nothing added: its pip alone
    print(f"pip install of the wheel into a fresh venv, {os.cpu_count()} cores, {args.python}\n")
    print("| install | venv s | install s, cache empty | install s, cache filled | venv size MB | target |\n|---|---|---|---|---|---|")
    print(f"| empty venv (its pip) | {empty[0]:.1f} | – | – | {empty[2] / 1e6:.0f} | – |")
    for label, cold, warm in rows:
        target = "≤ 30 s, ≤ 80 MB" if label == "base" else "–"
        print(f"| {label} | {cold[0]:.1f} | {cold[1]:.1f} | {warm[1]:.1f} | {cold[2] / 1e6:.0f} | {target} |")
    base = rows[0][1][3]
    print("\nbase install's versions: " + ", ".join(f"{n} {v}" for n, v in sorted(base.items()) if n.lower() not in ("pip", "setuptools")))
    added = sorted(set(rows[1][1][3]) - set(base))
    print(f"[report] adds: {', '.join(added)} ({(rows[1][1][2] - rows[0][1][2]) / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
