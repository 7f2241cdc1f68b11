"""Option types the commands' parsers share that need more than core may load."""

from __future__ import annotations

import argparse


def max_memory(text: str) -> dict:
    """--max-memory: `DEVICE=SIZE,...` (cuda:0 or 0, cpu, disk; 20GiB, 500MB) as accelerate's
    max_memory, checked here so a typo is one line, not a traceback from the loader."""
    from accelerate.utils import convert_file_size_to_int

    limits: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        device, _, size = part.partition("=")
        device = device.strip().removeprefix("cuda:")
        if not size or not (device.isdigit() or device in ("cpu", "disk")):
            raise argparse.ArgumentTypeError(f"expected DEVICE=SIZE items such as cuda:0=20GiB,cpu=64GiB, got {part!r}")
        try:
            convert_file_size_to_int(size.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{size.strip()!r} is not a size such as 20GiB or 500MB") from None
        limits[int(device) if device.isdigit() else device] = size.strip()
    if not limits:
        raise argparse.ArgumentTypeError("expected DEVICE=SIZE items such as cuda:0=20GiB,cpu=64GiB")
    return limits
