"""Against the ceiling: decode is memory-bound, so compare the rate at which each weight format reads
what a decode step reads (bytes per token × tok/s) with the fastest read of the same bytes, and the
best sound lever mix with llama.cpp decoding the same GGUF (its server from the `xllamacpp` wheel,
when installed: `make bench-peer`).

Bytes per token = the weights (each tensor once; the embedding table only where the LM head is tied
to it and so reads all of it) + the KV cache at the run's mean context. That working set is read
again every step, so it lives in whichever level of the hierarchy holds it: the reference is a
read of the same number of bytes, repeated as decode repeats it (the best of several sums of an
array on huge pages, as the engine's weights lie, with the engine's threads), measured just before
and after each run. A DRAM-sized read (4 × the last-level cache, at least 1 GiB) is shown beside
it. The cache sizes are CPU 0's from sysfs; the read rates say where the bytes really live (a VM
may report its host's caches or a share of them). A ratio above 1 means the reference is wrong for
that working set, and is printed with a warning, never alone.

tokentop's rate is its wall-clock decode tok/s (monitors/timing.py: from the prefill's emission to
the last token's). llama.cpp's is its own `timings.predicted_per_second` (tokens after the first ÷
the time from the first to the last, measured inside its server), with EOS banned by its own
`ignore_eos` (a logit bias in its C++ sampler, no Python on its path). The two are interleaved
(tokentop, llama.cpp, tokentop, …) over the same prompt tokens and the ratio is the median of the
pairs' ratios with their range: this VM's bandwidth swings by a third within minutes.

`--kernels best,portable` runs the whole comparison once per body of the CPU kernels
(engine/native.py), each in a process of its own, one after the other.

    .venv/bin/python benchmarks/engine/ceiling.py [--tokens 64] [--repeats 3] [--pairs 5] [--threads N] [--kernels best,portable]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import median_range

GIB = 2**30
SIZE_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text: str) -> int:
    """sysfs cache sizes: '48K', '1024K', '32768K' (a plain number is bytes)."""
    text = text.strip()
    return int(text[:-1]) * SIZE_UNITS[text[-1]] if text[-1] in SIZE_UNITS else int(text)


def cache_levels(root: str = "/sys/devices/system/cpu/cpu0/cache") -> list[tuple[str, int]]:
    """CPU 0's data caches, innermost first: ('L1d', bytes), ('L2', bytes), ('L3', bytes)."""
    levels = []
    for index in sorted(glob.glob(os.path.join(root, "index*"))):

        def read(name: str, index: str = index) -> str:
            with open(os.path.join(index, name)) as f:
                return f.read().strip()

        try:
            kind, level, size = read("type"), read("level"), parse_size(read("size"))
        except (OSError, ValueError, KeyError, IndexError):
            continue
        if kind != "Instruction":
            levels.append((f"L{level}" + ("d" if kind == "Data" else ""), size))
    return sorted(levels, key=lambda lv: (int(lv[0][1:].rstrip("d")), lv[1]))


def home(nbytes: float, levels: list[tuple[str, int]]) -> str:
    """The innermost level whose size holds `nbytes`, or DRAM."""
    return next((name for name, size in levels if nbytes <= size), "DRAM")


def ratio_cell(ratio: float) -> str:
    """A ratio to a ceiling; above 1 it says the ceiling is not one."""
    return f"{ratio:.2f}" if ratio <= 1 else f"{ratio:.2f} ⚠ above the read of the same bytes: that reference is wrong for this working set"


class ReadRate:
    """The best rate of summing the first `nbytes` of one array on huge pages (engine/pages.py),
    with torch's threads (set to the engine's count by Engine.load): the array is summed once
    first, as the previous decode step leaves its working set wherever it fits, then `repeats`
    times. One array serves every size, so no read pays for fresh pages."""

    def __init__(self, nbytes: int):
        import torch

        from tui_app.engine import pages

        self.array = pages.empty(nbytes // 8 * 8).view(torch.float64).fill_(1)

    def __call__(self, nbytes: float, repeats: int = 5) -> float:
        part = self.array[: max(1, int(nbytes) // 8)]
        part.sum()
        best = 0.0
        for _ in range(repeats):
            t = time.perf_counter()
            part.sum()
            best = max(best, part.numel() * 8 / (time.perf_counter() - t))
        return best


def gguf_bytes_per_token(gguf: str, context: float) -> float:
    """What llama.cpp reads per decode step of `gguf`, counted as weight_bytes counts ours: every
    tensor as stored in the file (the embedding table only when it is also the LM head), plus its
    default f16 KV cache at a mean context of `context` tokens."""
    from gguf import GGUFReader

    reader = GGUFReader(gguf)

    def field(key: str):
        return reader.fields[key].contents()

    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    if "output.weight" in sizes:  # an untied head: the table is read one row per token
        sizes.pop("token_embd.weight")
    arch = field("general.architecture")
    head_dim = field(f"{arch}.embedding_length") // field(f"{arch}.attention.head_count")
    kv = 2 * 2 * field(f"{arch}.block_count") * field(f"{arch}.attention.head_count_kv") * head_dim * context
    return sum(sizes.values()) + kv


# llama.cpp's own server (xllamacpp), in a child process: a crash of the peer (one of this project's
# VMs saw llama.cpp die of SIGSEGV in its AMX kernels) ends the peer, not the benchmark.
_SERVER = """
import sys
import xllamacpp
p = xllamacpp.CommonParams()
p.model.path, p.n_ctx, p.n_parallel, p.port = sys.argv[1], int(sys.argv[3]), 1, 0
p.cpuparams.n_threads = p.cpuparams_batch.n_threads = int(sys.argv[2])
server = xllamacpp.Server(p)
print(server.listening_address, flush=True)
sys.stdin.read()  # serves until the benchmark closes this pipe
"""


class PeerError(RuntimeError):
    pass


class LlamaCppServer:
    """llama.cpp's server on `gguf` with `threads` threads, asked over HTTP (port 0: one the system picks)."""

    def __init__(self, gguf: str, threads: int, n_ctx: int):
        import tempfile

        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, gguf, str(threads), str(n_ctx)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        self.address = self.proc.stdout.readline().strip()
        if not self.address.startswith("http"):
            raise PeerError(f"llama.cpp's server did not start: {self.reason()}")

    def reason(self) -> str:
        code = self.proc.poll()
        self.log.seek(0)
        last = (self.log.read().strip().splitlines() or ["no message"])[-1]
        return f"{'exit ' + str(code) if code is not None else 'running'}: {last[:200]}"

    def decode_tps(self, prompt_ids: list[int], tokens: int) -> float:
        """Its own decode rate for `tokens` new tokens after these prompt tokens, EOS banned, greedy."""
        body = {"prompt": prompt_ids, "n_predict": tokens, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
        req = urllib.request.Request(f"{self.address}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                timings = json.load(r)["timings"]
        except (OSError, ValueError, KeyError) as exc:
            raise PeerError(f"llama.cpp's server failed ({exc}; {self.reason()})") from None
        if timings["predicted_n"] != tokens:
            raise PeerError(f"llama.cpp made {timings['predicted_n']} tokens, not {tokens}")
        return float(timings["predicted_per_second"])

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=5, help="tokentop / llama.cpp runs interleaved (at least 5 for a median with a range)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: the engine's, cores - 1); llama.cpp is compared at the same count")
    ap.add_argument("--variants", default="fp32,fp32+compile,int8,int8+compile,int4,int4+compile")
    ap.add_argument("--kernels", default="", help="kernel bodies to measure one after the other (e.g. best,portable); default: this process's")
    args = ap.parse_args()
    modes = [m.strip() for m in args.kernels.split(",") if m.strip()]
    if modes:  # a process keeps the body it loaded: one child per body, printing as it goes
        argv = [f"--{k}={v}" for k, v in vars(args).items() if k != "kernels"]
        for mode in modes:
            print(f"\n## TOKENTOP_CPU_KERNELS={mode}", flush=True)
            code = subprocess.run([sys.executable, os.path.abspath(__file__), *argv], env={**os.environ, "TOKENTOP_CPU_KERNELS": mode}, check=False).returncode
            if code:
                return code
        return 0
    from tui_app.commands.bench import apply_levers
    from tui_app.core import fmt
    from tui_app.core.session import Session
    from tui_app.engine.bandwidth import weight_bytes
    from tui_app.engine.generation import Engine, EngineConfig
    from tui_app.engine.models import find_default_gguf
    from tui_app.requests import RunRequest

    variants = {
        "fp32": {},
        "fp32+compile": {"compile": True},
        "int8": {"quant": "int8"},
        "int8+compile": {"quant": "int8", "compile": True},
        "int4": {"quant": "int4"},
        "int4+compile": {"quant": "int4", "compile": True},
    }
    session = Session()
    engine = Engine(EngineConfig(threads=args.threads), session.feed)
    engine.load()
    levels = cache_levels()
    dram_bytes = max(GIB, 4 * max((size for _, size in levels), default=0))
    read = ReadRate(dram_bytes)
    ids, _ = engine.prompt_ids(RunRequest(max_new_tokens=args.tokens))
    req = RunRequest(prompt_ids=ids, max_new_tokens=args.tokens, ignore_eos=True)
    mean_context = len(ids) + args.tokens / 2

    def run():
        fin = engine.run(req)
        return session.timer.runs[fin.run_id].total

    rows = []
    for name in [v.strip() for v in args.variants.split(",") if v.strip()]:
        refused = apply_levers(engine, variants[name])
        if refused:
            rows.append({"name": name, "refused": refused})
            continue
        warm = run()
        # the KV a step reads at the run's mean context: the final cache scaled back from its length
        per_token = weight_bytes(engine.control.variants[engine.levers.quant]) + warm.kv_bytes * mean_context / (len(ids) + warm.n_tokens)
        dram = [read(dram_bytes, 3)]
        tps, reads, ratios = [], [read(per_token)], []
        for _ in range(args.repeats):
            tps.append(run().decode_tps)
            reads.append(read(per_token))
            ratios.append(per_token * tps[-1] / max(reads[-2], reads[-1]))  # against the better of the reads beside the run
        dram.append(read(dram_bytes, 3))
        rows.append(
            {
                "name": name,
                "tps": statistics.median(tps),
                "bytes": per_token,
                "home": home(per_token, levels),
                "same": max(reads),
                "ratio": statistics.median(ratios),
                "dram": max(dram),
            }
        )
    caches = ", ".join(f"{n} {fmt.nbytes(s)}" for n, s in levels) or "not reported"
    from tui_app.engine import native

    print(
        f"\n{engine.ready.model} on {engine.device}, {engine.threads} thread(s), the {native.isa()} kernels, {len(ids)} prompt + {args.tokens} new tokens; "
        f"CPU 0's caches (sysfs): {caches}\nceiling: the best of 5 sums of the working set's bytes (after one that brings them "
        f"wherever they fit) just before and after each run; DRAM: the best of 3 sums of {fmt.nbytes(dram_bytes)}; ratios: the median of {args.repeats} runs\n"
    )
    print("| weights | decode tok/s | bytes/token | fits (by size) | achieved GB/s | read of the same bytes GB/s | ÷ that read | DRAM read GB/s | ÷ DRAM |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "refused" in r:
            print(f"| {r['name']} | refused: {r['refused']} | | | | | | | |")
            continue
        achieved = r["bytes"] * r["tps"]
        print(
            f"| {r['name']} | {r['tps']:.1f} | {fmt.nbytes(r['bytes'])} | {r['home']} | {achieved / 1e9:.1f} | {r['same'] / 1e9:.1f} "
            f"| {ratio_cell(r['ratio'])} | {r['dram'] / 1e9:.1f} | {achieved / r['dram']:.2f} |"
        )
    measured = [r for r in rows if "tps" in r]
    print()
    if not measured:
        return 0
    best = max(measured, key=lambda r: r["tps"])
    if importlib.util.find_spec("xllamacpp") is None:
        print("llama.cpp: not installed (`make bench-peer` installs its server, the xllamacpp wheel, into .peer/)")
        return 0
    gguf = str(find_default_gguf())
    apply_levers(engine, variants[best["name"]])
    try:
        peer = LlamaCppServer(gguf, engine.threads, 2 * (len(ids) + args.tokens))
    except PeerError as exc:
        print(f"llama.cpp: {exc}")
        return 0
    try:
        peer.decode_tps(ids, args.tokens)  # warm
        ours, theirs = [], []
        for _ in range(args.pairs):
            ours.append(run().decode_tps)
            theirs.append(peer.decode_tps(ids, args.tokens))
        peer_bytes = gguf_bytes_per_token(gguf, mean_context)
        peer_read = read(peer_bytes)
    except PeerError as exc:
        print(f"llama.cpp: {exc}")
        return 0
    finally:
        peer.close()
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    print(
        f"llama.cpp's server on the same GGUF and prompt tokens, {engine.threads} thread(s), {args.pairs} pairs interleaved "
        f"(tokentop {best['name']}, then llama.cpp): tokentop {median_range(ours)} tok/s (wall clock), llama.cpp {median_range(theirs)} tok/s "
        f"(its own timings); tokentop ÷ llama.cpp, the median of the pairs' ratios (range): {median_range(ratios)} (target ≥ 0.5)\n"
        f"llama.cpp reads {fmt.nbytes(peer_bytes)} per token ({home(peer_bytes, levels)} by size): "
        f"{peer_bytes * statistics.median(theirs) / 1e9:.1f} GB/s, {ratio_cell(peer_bytes * statistics.median(theirs) / peer_read)} "
        f"of a read of the same bytes ({peer_read / 1e9:.1f} GB/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
