"""`e` in the app: the session as one JSON file, every run's figures by name, strict JSON (no NaN);
and a run's figures as one JSON line (`--no-tui -o json`)."""

from __future__ import annotations

import json
from dataclasses import asdict

from monitors.files import write_whole
from monitors.phases import ANSWER, PHASES, THINKING, TOOL
from tui_app.core import fmt, ledger
from tui_app.core.energy import CPU, GPU
from tui_app.core.session import Row, Session


def row_figures(row: Row) -> dict:
    """A row's figures by name: the export's runs, and `run`'s and `attach`'s `--no-tui -o json` lines."""
    s, f = row.stats, row.finished
    itl = s.itl
    server = (f.server or {}) if f else {}
    return {
        "run": row.label,
        "levers": asdict(s.levers),
        "levers_end": asdict(row.end_levers or s.levers),
        "prompt_tokens": s.prompt_tokens,
        "new_tokens": s.n_tokens,
        "ttft_s": s.ttft_s,
        "ttfa_s": s.ttfa_s,
        "thinking_tokens": s.phase_tokens.get(THINKING, 0),
        "answer_tokens": s.phase_tokens.get(ANSWER, 0),
        "tool_tokens": s.phase_tokens.get(TOOL, 0),
        "thinking_share": s.thinking_share,
        "server_reasoning_tokens": server.get("server_reasoning_tokens"),
        "itl_p50_s_by_phase": {p: s.phase_itl(p).p50 for p in PHASES if s.phase_tokens.get(p)},
        "itl_mean_s": itl.mean,
        "itl_p50_s": itl.p50,
        "itl_p95_s": itl.p95,
        "itl_p99_s": itl.p99,
        "decode_tok_s": s.decode_tps,
        "e2e_s": s.e2e_s,
        "kv_bytes": s.kv_bytes,
        "accept_rate": s.accept_rate,
        "peak_rss": f.peak_rss if f else None,
        "perplexity": f.perplexity if f else None,
        "ended": f.stop_reason if f else row.note,
        "output": f.diff_note if f else row.note,
        "roofline": row.roofline.text if row.roofline else None,
        "gpu_slowed_s": row.slowed_s,
        "gpu_energy_j": row.energy_j if row.energy_source == GPU else None,
        "cpu_energy_j": row.energy_j if row.energy_source == CPU else None,  # the packages', all they ran
        "j_per_token": row.j_per_token,
        "energy_reason": row.energy_reason or None,  # why no J/token: no counter on the GPUs or the CPU
        "expert_counts": f.expert_counts if f else None,
    }


def run_json(session: Session, run_id: int) -> str:
    """One line of strict JSON (no NaN) for a run: its figures, its output, and where a lever
    switched midway (or a server's streams), each segment's figures."""
    rows = [row for row in session.rows() if row.run_id == run_id]
    data = row_figures(rows[0]) | {"text": rows[0].finished.text if rows[0].finished else None}
    if len(rows) > 1:
        data["segments"] = [row_figures(r) for r in rows[1:]]
    return json.dumps(fmt.strict_json(data), default=str, allow_nan=False, ensure_ascii=False)


def export_session(session: Session, path: str) -> None:
    rows = [row_figures(row) for row in session.rows()]
    data = {
        "engine": asdict(session.ready) if session.ready else None,
        "leak": asdict(session.verdict) if session.verdict else None,
        "runs": rows,
        "ledger": [asdict(e) for e in ledger.entries(session)],
    }
    write_whole(path, json.dumps(fmt.strict_json(data), indent=2, default=str, allow_nan=False))
