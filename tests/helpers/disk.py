"""A real small disk for the full-disk tests: a tmpfs of a few kilobytes, mounted for the test and
unmounted after. Mounting needs root (CI runs as root); elsewhere the test skips and says why."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "40k"):
    """`folder` as a tmpfs of `size` bytes (k, m suffixes) for the duration."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip(f"mounting a {size} tmpfs for a full disk needs root (uid {os.geteuid()} here)")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mounting a {size} tmpfs for a full disk is not permitted here: {made.stderr.strip() or made.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path) -> None:
    """Take every free byte of the disk holding `folder`."""
    with open(folder / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
        while f.write(b"\0" * 4096):
            pass
