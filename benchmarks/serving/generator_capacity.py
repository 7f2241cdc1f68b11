"""The load generator's own capacity: can tokentop's open loop send at the rate asked, on time,
with its streams in flight? Measured beside `vllm bench serve`'s generator against the same fast
stand-in server (tests/helpers/sse_standin.py: a GPU server's pace cannot run here, and a CPU
server is far slower than either generator), both with evenly spaced arrivals (`--burstiness inf`).

The stand-in notes each request's arrival on CLOCK_MONOTONIC, outside both tools. Send error: a
request's arrival against its place on the ideal schedule (i ÷ rate from the first), less the
smallest such offset (the loopback's own latency, the same for every request): how late the
generator sent it. Achieved rate: the requests ÷ the span of their arrivals. tokentop's own
account of its lateness (RunStarted − planned, in its JSON) is shown beside, for what the
generator sees of itself. Each rate: tokentop and vLLM take turns, `--rounds` times, and every
round's requests are pooled.

    .venv/bin/python benchmarks/serving/generator_capacity.py [--rates 25,50,100,200] [--seconds 4]
        [--tokens 16] [--gap-ms 1] [--rounds 2] [--vllm-python PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.serving.peer_vllm import VLLM_VENV, VllmBench
from benchmarks.serving.pool import Cell
from monitors.timing import percentile
from tests.helpers.sse_standin import SseStandIn


def send_errors(arrivals_ns: list[int], rate: float) -> tuple[float, list[float]]:
    """(the achieved rate, each request's lateness in s) from the arrivals of an evenly spaced run."""
    t = sorted(arrivals_ns)
    if len(t) < 2:
        return float("nan"), []
    offsets = [(a - t[0]) / 1e9 - i / rate for i, a in enumerate(t)]
    base = min(offsets)
    return (len(t) - 1) / ((t[-1] - t[0]) / 1e9), [o - base for o in offsets]


def tokentop_run(url: str, rate: float, n: int, tokens: int, work: Path) -> list[float]:
    """tokentop's open loop at `rate`; its own lateness figures (s)."""
    out = work / "tokentop"
    cmd = [sys.executable, "-m", "tui_app", "bench", "--endpoint", url, "--lengths", f"8:{tokens}", "--rate", f"{rate:g}", "--burstiness", "inf"]
    cmd += ["--requests", str(n), "--repeats", "1", "--warmup", "0", "-o", "json", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"tokentop bench exited {done.returncode}: {done.stderr[-2000:]}")
    reqs = json.loads(out.with_suffix(".json").read_text())["requests"][0]
    return [r["late_s"] for r in reqs if r.get("late_s") is not None]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="25,50,100,200")
    p.add_argument("--seconds", type=float, default=4.0, help="of arrivals a run")
    p.add_argument("--tokens", type=int, default=16, help="chunks a stream")
    p.add_argument("--gap-ms", type=float, default=1.0, help="between a stream's chunks")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--vllm-python", default=str(VLLM_VENV / "bin" / "python"))
    args = p.parse_args()
    from tui_app.engine.models import converted_default

    standin = SseStandIn(args.gap_ms)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="tokentop-capacity-") as tmp:
            work = Path(tmp)
            vllm = VllmBench(args.vllm_python, work)
            try:
                for rate in [float(r) for r in args.rates.split(",")]:
                    n = max(int(rate * args.seconds), 20)
                    pooled: dict[str, dict] = {"tokentop": {"rates": [], "late": [], "own": []}, "vllm bench serve": {"rates": [], "late": [], "own": []}}
                    for k in range(args.rounds):
                        for tool in ("tokentop", "vllm bench serve") if k % 2 == 0 else ("vllm bench serve", "tokentop"):
                            standin.reset()
                            if tool == "tokentop":
                                pooled[tool]["own"] += tokentop_run(standin.url, rate, n, args.tokens, work)
                            else:
                                vllm.run(standin.url, str(converted_default()), Cell(f"r{rate:g}", None, rate, n), 8, args.tokens, 1 + k, keep_alive=True)
                            achieved, late = send_errors(standin.arrivals(), rate)
                            pooled[tool]["rates"].append(achieved)
                            pooled[tool]["late"] += late
                    for tool, d in pooled.items():
                        rows.append((rate, tool, sum(d["rates"]) / len(d["rates"]), d["late"], d["own"]))
                    print(f"{rate:g} req/s done", file=sys.stderr)
            finally:
                vllm.close()
    finally:
        standin.close()
    print(f"Stand-in: {args.tokens} chunks a stream, {args.gap_ms:g} ms apart; evenly spaced arrivals, {args.seconds:g} s of them, {args.rounds} rounds each\n")
    print("| rate asked | generator | achieved req/s | send error p50 / p99 / max (ms, at the server) | its own lateness p99 (ms) |")
    print("|---|---|---|---|---|")
    for rate, tool, achieved, late, own in rows:
        ms = " / ".join(f"{percentile(late, q) * 1000:.2f}" for q in (50, 99, 100))
        mine = f"{percentile(own, 99) * 1000:.2f}" if own else "–"
        print(f"| {rate:g} | {tool} | {achieved:.1f} | {ms} | {mine} |")


if __name__ == "__main__":
    main()
