"""Number formatting shared by the TUI, the headless output and the benchmark tables."""

from __future__ import annotations

import math


def _bad(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def ms(seconds: float | None, digits: int = 1, unit: bool = True) -> str:
    return "–" if _bad(seconds) else f"{seconds * 1000:.{digits}f}" + (" ms" if unit else "")


def mib(n: float | None) -> str:
    return "–" if _bad(n) else f"{n / 2**20:.1f}"


def num(x: float | None, digits: int = 1, unit: str = "") -> str:
    return "–" if _bad(x) else f"{x:.{digits}f}{unit}"


def nbytes(n: float | None) -> str:
    if _bad(n):
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def pct(x: float | None) -> str:
    return "–" if _bad(x) else f"{x * 100:.0f}%"


def strict_json(obj):
    """`obj` with every NaN and ±inf float as None: strict JSON parsers (browsers, jq, most
    languages) reject the bare NaN that Python's json writes by default."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj
