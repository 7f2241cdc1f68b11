"""NVIDIA's AIPerf as the agreement's second peer (benchmarks/serving/peer_agreement.py): its profile of
one cell, and its records pooled as the other tools' requests are."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks.serving.cpus import on_cpus
from benchmarks.serving.pool import Cell, Pooled


def run(
    aiperf: str,
    url: str,
    tokenizer: str,
    cell: Cell,
    p_len: int,
    new: int,
    workdir: Path,
    seed: int,
    cpus: set[int] | None = None,  # the tools' CPUs
) -> tuple[list[dict], float]:
    """AIPerf's profile of the same cell: its per-request records and its benchmark duration (s).
    `--use-legacy-max-tokens`: llama.cpp's completions read max_tokens, not max_completion_tokens."""
    out = workdir / f"aiperf-{cell.name.replace('/', '')}-{seed}"
    cmd = [aiperf, "profile", "--model", "smollm2", "--url", url, "--endpoint-type", "completions", "--streaming", "--tokenizer", tokenizer, "--ui", "none"]
    cmd += ["--synthetic-input-tokens-mean", str(p_len), "--synthetic-input-tokens-stddev", "0"]
    cmd += ["--output-tokens-mean", str(new), "--output-tokens-stddev", "0", "--use-legacy-max-tokens"]
    cmd += ["--extra-inputs", "ignore_eos:true", "--request-count", str(cell.requests), "--random-seed", str(seed), "--artifact-dir", str(out)]
    cmd += ["--concurrency", str(cell.concurrency)] if cell.concurrency else ["--request-rate", str(cell.rate), "--arrival-pattern", "constant"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=workdir, preexec_fn=on_cpus(cpus))
    if done.returncode != 0:
        raise RuntimeError(f"aiperf exited {done.returncode}: {done.stderr[-2000:] or done.stdout[-2000:]}")
    records = [json.loads(line) for line in (out / "profile_export.jsonl").read_text().splitlines() if line.strip()]
    duration = json.loads((out / "profile_export_aiperf.json").read_text())["benchmark_duration"]["avg"]
    return records, duration


def add(pool: Pooled, profile: tuple[list[dict], float]) -> None:
    """AIPerf's records (ms): TTFT, a gap a chunk after the first (its inter_chunk_latency: the
    final, empty chunk is not among them, so a gap a token here), the request's latency."""
    records, duration = profile
    for rec in records:
        m = rec.get("metrics") or {}
        if rec.get("error") or "time_to_first_token" not in m:
            pool.failed += 1
            continue
        ttft, latency, n = m["time_to_first_token"]["value"] / 1000, m["request_latency"]["value"] / 1000, int(m["output_sequence_length"]["value"])
        gaps = [x / 1000 for x in (m.get("inter_chunk_latency") or {}).get("value") or []]
        pool.ttft.append(ttft)
        pool.itl.extend(gaps)
        pool.itl_chunks.extend(gaps)
        if n > 1:
            pool.tpot.append((latency - ttft) / (n - 1))
        pool.tokens += n
    pool.wall_s += duration
