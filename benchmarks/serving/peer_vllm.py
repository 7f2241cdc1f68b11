"""`vllm bench serve` as the agreement's first peer (benchmarks/serving/peer_agreement.py): the module kept
imported in a process of its own in the vLLM venv (vllm_bench_serve.py), its run of one cell,
and its per-request results pooled as the other tools' requests are."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks.serving.cpus import on_cpus
from benchmarks.serving.pool import Cell, Pooled

VLLM_VENV = Path.home() / ".cache" / "tokentop" / "vllm-venv"
DRIVER = Path(__file__).with_name("vllm_bench_serve.py")


class VllmBench:
    """`vllm bench serve` kept imported in a process of its own (benchmarks/serving/vllm_bench_serve.py)."""

    def __init__(self, python: str, workdir: Path, cpus: set[int] | None = None):
        from benchmarks.serving.vllm_bench_serve import DONE

        self.done = DONE
        self.workdir = workdir
        self.log = open(workdir / "vllm-bench.log", "w")  # noqa: SIM115 - open for the process's life
        self.proc = subprocess.Popen([python, str(DRIVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, preexec_fn=on_cpus(cpus))
        self._wait()

    def _wait(self) -> None:
        for line in self.proc.stdout:
            if line.strip() == self.done:
                return
            self.log.write(line)
        raise RuntimeError(f"vllm bench serve ended (exit {self.proc.wait()}); its log: {self.workdir / 'vllm-bench.log'}")

    def run(self, url: str, tokenizer: str, cell: Cell, p_len: int, new: int, seed: int, keep_alive: bool = False) -> dict:
        name = f"vllm-{cell.name.replace('/', '')}-{seed}.json"
        argv = [
            "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions", "--model", "smollm2", "--tokenizer", tokenizer,
            "--dataset-name", "random", "--random-input-len", str(p_len), "--random-output-len", str(new), "--ignore-eos",
            "--num-prompts", str(cell.requests), "--seed", str(seed), "--temperature", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            "--save-result", "--save-detailed", "--result-dir", str(self.workdir), "--result-filename", name,
            "--disable-tqdm",
        ]  # fmt: skip
        if not keep_alive:  # llama.cpp's server: see peer_agreement.py's docstring
            argv += ["--header", "Connection=close"]
        if cell.concurrency:
            argv += ["--max-concurrency", str(cell.concurrency), "--request-rate", "inf"]
        else:
            argv += ["--request-rate", str(cell.rate), "--burstiness", "inf"]
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        self._wait()
        return json.loads((self.workdir / name).read_text())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)
        self.log.close()


def add_vllm(pool: Pooled, data: dict) -> None:
    for ttft, itls, latency, n, err in zip(data["ttfts"], data["itls"], data["latencies"], data["output_lens"], data["errors"], strict=True):
        if err or not n:
            pool.failed += 1
            pool.errors.append(err or "no tokens")
            continue
        pool.ttft.append(ttft)
        pool.itl_chunks.extend(itls)
        pool.itl.extend(itls[: n - 1])  # a gap a token: the stream's last, empty chunk left out
        if n > 1:
            pool.tpot.append((latency - ttft) / (n - 1))
        pool.tokens += n
    pool.wall_s += data["duration"]
