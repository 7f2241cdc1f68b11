"""`e` in the app: the session as one JSON file, every run's figures by name, strict JSON (no NaN)."""

from __future__ import annotations

import json
from dataclasses import asdict

from monitors.files import write_whole
from tui_app.core import fmt, ledger
from tui_app.core.session import Session


def export_session(session: Session, path: str) -> None:
    rows = []
    for row in session.rows():
        s = row.stats
        itl = s.itl
        rows.append(
            {
                "run": row.label,
                "levers": asdict(s.levers),
                "levers_end": asdict(row.end_levers or s.levers),
                "prompt_tokens": s.prompt_tokens,
                "new_tokens": s.n_tokens,
                "ttft_s": s.ttft_s,
                "itl_mean_s": itl.mean,
                "itl_p50_s": itl.p50,
                "itl_p95_s": itl.p95,
                "itl_p99_s": itl.p99,
                "decode_tok_s": s.decode_tps,
                "e2e_s": s.e2e_s,
                "kv_bytes": s.kv_bytes,
                "accept_rate": s.accept_rate,
                "peak_rss": row.finished.peak_rss if row.finished else None,
                "perplexity": row.finished.perplexity if row.finished else None,
                "ended": row.finished.stop_reason if row.finished else row.note,
                "output": row.finished.diff_note if row.finished else row.note,
                "roofline": row.roofline.text if row.roofline else None,
                "gpu_slowed_s": row.slowed_s,
            }
        )
    data = {
        "engine": asdict(session.ready) if session.ready else None,
        "leak": asdict(session.verdict) if session.verdict else None,
        "runs": rows,
        "ledger": [asdict(e) for e in ledger.entries(session)],
    }
    write_whole(path, json.dumps(fmt.strict_json(data), indent=2, default=str, allow_nan=False))
