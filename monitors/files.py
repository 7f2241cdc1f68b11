"""Writing files whole, and one line for why a write failed.

A disk fills under a session that runs for hours: what tokentop writes (a recording, an export, a
bench table, a report) is then either complete or absent, never a cut file that a reader later
rejects, and the user is told in one line that the disk is full rather than shown an OSError.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

# A full disk and a full quota look the same to the user: nothing more can be written there.
FULL = (errno.ENOSPC, errno.EDQUOT)


def is_full(exc: OSError) -> bool:
    return exc.errno in FULL


def write_error(exc: OSError, path: str | os.PathLike) -> str:
    """Why `path` could not be written, in a few words: the folder whose disk is full, or the error."""
    p = Path(path)
    if is_full(exc):
        return f"the disk holding {p.parent} is full ({exc.strerror})"
    return f"cannot write {p} ({exc.strerror or exc})"


def write_whole(path: str | os.PathLike, data: str | bytes) -> None:
    """`data` into `path` through a temporary file beside it, renamed over it once complete: on a
    full disk the old file (if any) stays as it was and no cut file is left. OSError as the write's."""
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = p.parent / f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}.part"
    # 0o666 less the umask, as open() would make it (mkstemp's 0o600 would hide an export from others).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
