"""A fleet's rows as text (tui_app/attach/fleet.py reads them): the columns, each cell, the fleet's
row and its energy line, for the fleet pane, `attach --prometheus --no-tui` and `tokentop report`."""

from __future__ import annotations

import re

from monitors.events import FleetSample
from monitors.fleet import row_name
from tui_app.core import fmt

COLUMNS = (
    ("replica", 10),
    ("engine", 6),
    ("up", 4),
    ("KV", 4),
    ("run", 3),
    ("wait", 4),
    ("prompt t/s", 10),
    ("gen t/s", 7),
    ("TTFT p50/p99", 12),
    ("ITL p50/p99", 11),
    ("preempt/s", 9),
    ("prefix", 6),
    ("marks", 5),
)


def _quant(q) -> str:
    if not q:
        return "–"
    return f"{fmt.ms(q.get('p50'), 0, unit=False)}/{fmt.ms(q.get('p99'), 0, unit=False)}"


def up_text(row: dict, now: float) -> str:
    """up / down, since when (as long ago), where tokentop or the backfill saw the change."""
    state = "up" if row.get("up") else "down" if row.get("up") is False else "?"
    since = row.get("since")
    return state if since is None else f"{state} {fmt_age(now - since)}"


def fmt_age(seconds: float) -> str:
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


def cells(row: dict, now: float, name: str | None = None) -> list[str]:
    return [
        name or row_name(row),
        row.get("family") or "?",
        up_text(row, now),
        fmt.pct(row.get("kv_usage")),
        fmt.num(row.get("running"), 0),
        fmt.num(row.get("waiting"), 0),
        fmt.num(row.get("prompt_tps"), 1),
        fmt.num(row.get("gen_tps"), 1),
        _quant(row.get("ttft")),
        _quant(row.get("itl")),
        fmt.num(row.get("preemptions"), 2),
        fmt.pct(row.get("prefix_hit")),
        "; ".join(row.get("marks") or ()),
    ]


def fleet_cells(sample: FleetSample) -> list[str]:
    rows = [r for r in sample.rows if not r.get("server")]
    up = sum(1 for r in rows if r.get("up"))
    f = sample.fleet
    return ["fleet", f"{len(rows)}", f"{up}/{len(rows)} up", *cells({**f, "up": None}, sample.ts, name="fleet")[3:12], ""]


def energy_text(fleet: dict) -> str:
    """The fleet's power and joules per generated token, where a DCGM exporter reports them."""
    if fleet.get("power_w") is None:
        return "energy: not reported (no DCGM exporter among Prometheus' targets)"
    text = f"power {fleet['power_w']:.0f} W over {fleet.get('gpus') or 0:.0f} GPUs (DCGM_FI_DEV_POWER_USAGE)"
    jpt = fleet.get("j_per_token")
    text += (
        f", {jpt:.2f} J/token (ΔDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION ÷ Δgenerated tokens)"
        if jpt is not None
        else ", J/token: no tokens generated in the window"
    )
    return text


def _natural(text: str) -> list:
    """replica-2 before replica-10, 10.0.0.9 before 10.0.0.10."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text or "")]


def table(sample: FleetSample) -> list[list[str]]:
    """The header, a row per replica (a router's backends after), the fleet's row."""
    out = [[c for c, _ in COLUMNS]]
    rows = sorted(sample.rows, key=lambda r: (bool(r.get("server")), *(_natural(r[k]) for k in ("job", "instance", "engine", "server"))))
    out += [cells(r, sample.ts) for r in rows]
    out.append(fleet_cells(sample))
    return out


def table_text(sample: FleetSample) -> list[str]:
    grid = table(sample)
    widths = [max(len(r[i]) for r in grid) for i in range(len(COLUMNS))]
    return [
        "  ".join(c.ljust(w) if i < 3 or i == len(COLUMNS) - 1 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip() for r in grid
    ]
