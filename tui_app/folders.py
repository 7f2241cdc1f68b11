"""Every folder tokentop writes, the variable that moves it, and one line when it cannot be written.

- cache (TOKENTOP_CACHE): converted model copies, engine.log, tokentop's compiled C++ kernels
- data (TOKENTOP_DATA): recordings; exports and screenshots too, unless --out-dir says otherwise
- torch.compile's kernels (TORCHINDUCTOR_CACHE_DIR, torch's own variable)

Each is checked by writing a file there, not by permission bits: root passes any permission check,
and a folder on a read-only mount or a path through a regular file fails only on the write.
No torch import here: the UI process never loads torch.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from pathlib import Path


class FolderError(Exception):
    """A folder tokentop must write cannot be written; the message names it and its variable."""


def cache_root() -> Path:
    env = os.environ.get("TOKENTOP_CACHE")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("tokentop"))


def data_root() -> Path:
    env = os.environ.get("TOKENTOP_DATA")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("tokentop"))


def recordings_dir() -> Path:
    return data_root() / "recordings"


def stamped(folder: str | os.PathLike, kind: str, ext: str) -> Path:
    """The one naming style of what a session writes, sorting by time: tokentop-20261123-121500-export.json."""
    import time

    return Path(folder) / time.strftime(f"tokentop-%Y%m%d-%H%M%S-{kind}.{ext}")


def inductor_dir() -> Path:
    """Where torch.compile writes its kernels: torch's own default, computed as
    torch._inductor.runtime.cache_dir_utils does (importing it would load torch here)."""
    env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be written (it is created if missing), or None when it can."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def require(folder: Path, what: str, variable: str | None) -> Path:
    """`folder`, created; FolderError with one line naming it (and what moves it) when it cannot be written."""
    why = unwritable(folder)
    if why:
        fix = f"; set {variable} to a writable folder" if variable else "; choose a writable folder"
        raise FolderError(f"cannot write {what} in {folder} ({why}){fix}")
    return folder


def check_engine_folders() -> list[str]:
    """Before an engine starts: the cache must be writable (else every launch re-converts the model
    and the C++ kernels never build: a slow engine without a word). torch.compile's folder falls
    back to one inside the cache. Returns the lines to tell the user about a fallback."""
    require(cache_root(), "the model cache, engine log and compiled kernels", "TOKENTOP_CACHE")
    notes = []
    inductor = inductor_dir()
    why = unwritable(inductor)
    if why:
        if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
            raise FolderError(f"cannot write torch.compile's kernels in {inductor} ({why}); set TORCHINDUCTOR_CACHE_DIR to a writable folder")
        fallback = require(cache_root() / "inductor", "torch.compile's kernels", "TORCHINDUCTOR_CACHE_DIR")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(fallback)  # the engine process inherits it
        notes.append(f"torch.compile's kernels go to {fallback} ({inductor}: {why}; TORCHINDUCTOR_CACHE_DIR moves them)")
    return notes


def write_stamped(out_dir: str | None, what: str, kind: str, ext: str, write) -> Path:
    """`write(path)` for a stamped file (`stamped`) in --out-dir, else the recordings folder; the
    path, or FolderError with one line naming the folder or the file, and what moves it."""
    folder = require(Path(out_dir) if out_dir else recordings_dir(), what, "--out-dir" if out_dir else "--out-dir or TOKENTOP_DATA")
    path = stamped(folder, kind, ext)
    try:
        write(path)
    except OSError as exc:
        from monitors.files import write_error

        raise FolderError(f"{kind} not written: {write_error(exc, path)}") from None
    return path
