"""Against the ceiling: decode is memory-bound, so compare the bandwidth each weight format achieves
(bytes read per token × tok/s) with the machine's measured memory bandwidth, and the best sound
lever mix with llama.cpp decoding the same GGUF (when llama-cpp-python is installed: `make bench-peer`).

Bytes per token = the weights (each tensor once; the embedding table only where the LM head is tied
to it and so reads all of it) + the KV cache read at the mean context length. Bandwidth: the best of
three sums of a 1 GiB array on huge pages (as the engine's weights lie) with the engine's thread
count; llama.cpp runs with that count too, and
is put on the same measure (its bytes per token read from the GGUF, its KV cache in f16). Each
run is put against the bandwidth read just before and after it.

    .venv/bin/python benchmarks/ceiling.py [--tokens 64] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ReadBandwidth:
    """The best rate of summing `gib` GiB: on huge pages, as the engine's weights are (engine/pages.py),
    the memory's fastest read here (on one VM 26-28 GB/s on small pages, 31-34 on huge ones). Called
    between runs: this VM's bandwidth swings by a third within minutes (21.9 then 31.6 GB/s, seen;
    10.6 then 8.2 across one run of this script), so a run is put against the reads beside it."""

    def __init__(self, threads: int, gib: float = 1.0):
        import torch

        from tui_app.engine import pages

        torch.set_num_threads(threads)  # the engine's count: torch's sum splits the array across them
        self.array = pages.empty(int(gib * 2**30)).view(torch.float64).fill_(1)
        self.array.sum()

    def __call__(self, repeats: int = 3) -> float:
        best = 0.0
        for _ in range(repeats):
            t = time.perf_counter()
            self.array.sum()
            best = max(best, self.array.numel() * 8 / (time.perf_counter() - t))
        return best


def tensor_bytes(t) -> int:
    """Storage bytes of a tensor, looking inside tensor subclasses (torchao's quantized weights)."""
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def weight_bytes(model) -> int:
    """Weight bytes a decode step reads: each tensor once, but the embedding table only when the LM
    head is tied to it (then the head reads all of it); otherwise one row of it per token."""
    seen = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    table = model.get_input_embeddings().weight
    if getattr(model.get_output_embeddings(), "weight", None) is not table:
        seen.pop(id(table))
    return sum(tensor_bytes(t) for t in seen.values())


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


def llama_cpp_tps(gguf: str, tokens: int, threads: int, repacking: bool = True) -> tuple[float, float] | None:
    """llama.cpp's decode tok/s on `gguf` and the mean context of its runs, or None when it is not installed.
    `repacking=False` turns off its extra buffer types (weights repacked for AMX and other kernels)."""
    try:
        from llama_cpp import Llama
        from llama_cpp import llama_cpp as api
    except ImportError:
        return None
    if not repacking:
        defaults = api.llama_model_default_params

        def params():
            p = defaults()
            p.use_extra_bufts = False
            return p

        api.llama_model_default_params = params  # Llama() takes its model parameters from here
    llm = Llama(model_path=gguf, n_threads=threads, n_ctx=512, verbose=False)
    prompt = "Write a short story about a robot who learns to paint."
    # EOS banned, as tokentop's runs here ignore it: on a raw prompt the model may stop at once.
    no_eos = {llm.token_eos(): -1e9}
    llm(prompt, max_tokens=8, logit_bias=no_eos)
    out = []
    for _ in range(3):
        first = None
        n = 0
        for _chunk in llm(prompt, max_tokens=tokens, stream=True, temperature=0, logit_bias=no_eos):
            n += 1
            if first is None:
                first = time.perf_counter()  # decode starts after the first token (prefill)
        out.append((n - 1) / (time.perf_counter() - first))
    return statistics.median(out), len(llm.tokenize(prompt.encode())) + tokens / 2


def peer_tps(gguf: str, tokens: int, threads: int) -> tuple[float, float, str] | str | None:
    """llama_cpp_tps in a child process, so that a crash of the peer does not end the benchmark: on
    one of this project's VMs (AMX in its CPU flags) llama.cpp 0.3.36 died of SIGSEGV in
    `ggml_backend_amx_mul_mat` on its first decode. Then it is measured again without its repacked
    weight buffers, and the returned note says so; if that dies too, the reason comes back instead."""
    import json
    import subprocess

    crashed = None
    for repacking in (True, False):
        code = (
            f"import json, sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); import ceiling; "
            f"print(json.dumps(ceiling.llama_cpp_tps({gguf!r}, {tokens}, {threads}, {repacking})))"
        )
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
        if child.returncode == 0:
            result = json.loads(child.stdout.strip().splitlines()[-1])
            note = "" if crashed is None else f"; its repacked (AMX) weight buffers off: with them it died, exit {crashed}"
            return None if result is None else (result[0], result[1], note)
        crashed = child.returncode
    last = (child.stderr.strip().splitlines() or ["no message"])[-1]
    return f"not measured: it died with its repacked weight buffers and without them (exit {crashed}: {last[:200]})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: the engine's, cores - 1); llama.cpp is compared at the same count")
    args = ap.parse_args()
    from tui_app import fmt
    from tui_app.bench import apply_levers
    from tui_app.engine.generation import Engine, EngineConfig, RunRequest
    from tui_app.engine.models import find_default_gguf
    from tui_app.session import Session

    session = Session()
    engine = Engine(EngineConfig(threads=args.threads), session.feed)
    engine.load()
    bandwidth = ReadBandwidth(engine.threads)
    req = RunRequest(max_new_tokens=args.tokens, ignore_eos=True)
    rows = []
    for name, combo in [
        ("fp32", {}),
        ("fp32+compile", {"compile": True}),
        ("int8", {"quant": "int8"}),
        ("int8+compile", {"quant": "int8", "compile": True}),
        ("int4", {"quant": "int4"}),
        ("int4+compile", {"quant": "int4", "compile": True}),
    ]:
        refused = apply_levers(engine, combo)
        if refused:
            rows.append((name, None, None, None, None, refused))
            continue
        engine.run(req)
        wb = weight_bytes(engine._variants[engine.levers.quant])
        tps, per_token, reads, ratios = [], [], [bandwidth()], []
        for _ in range(args.repeats):
            fin = engine.run(req)
            st = session.timer.runs[fin.run_id].total
            reads.append(bandwidth())
            tps.append(st.decode_tps)
            per_token.append(wb + st.kv_bytes / 2)  # the mean context over the run holds about half the final KV
            # against the better of the reads just before and after the run: the ceiling of that minute
            ratios.append(per_token[-1] * tps[-1] / max(reads[-2], reads[-1]))
        rows.append((name, statistics.median(tps), statistics.mean(per_token), max(reads), statistics.median(ratios), ""))
    apply_levers(engine, {})
    gguf = str(find_default_gguf())
    before = bandwidth()
    peer = peer_tps(gguf, args.tokens, engine.threads)
    peer_bw = max(before, bandwidth())
    print(
        f"\n{engine.ready.model} on {engine.device}, {engine.threads} torch thread(s); read bandwidth: the best of "
        f"three sums of 1 GiB ({engine.threads} thread(s)) just before and after each run; the ratio is each run's "
        f"against its own reads, the median of {args.repeats} runs\n"
    )
    print("| weights | decode tok/s | bytes/token | achieved GB/s | read GB/s (best beside the runs) | ÷ bandwidth | target |\n|---|---|---|---|---|---|---|")
    for name, t, per_token, bw, ratio, refused in rows:
        if refused:
            print(f"| {name} | refused: {refused} | | | | | |")
        else:
            print(f"| {name} | {t:.1f} | {fmt.nbytes(per_token)} | {per_token * t / 1e9:.1f} | {bw / 1e9:.1f} | {ratio:.2f} | ≥ 0.8 |")
    best = max((r for r in rows if r[1]), key=lambda r: r[1])
    print()
    if peer is None:
        print("llama.cpp: llama-cpp-python is not installed (`make bench-peer` builds it into .peer/)")
    elif isinstance(peer, str):
        print(f"llama.cpp: {peer}")
    else:
        tps, context, note = peer
        per_token = gguf_bytes_per_token(gguf, context)
        # the peer on the same measure: what the ≥ 0.8 target asks of a quantized format here
        print(
            f"llama.cpp on the same GGUF, {engine.threads} thread(s){note}: {tps:.1f} tok/s × {fmt.nbytes(per_token)} per "
            f"token = {per_token * tps / 1e9:.1f} GB/s, {per_token * tps / peer_bw:.2f} of the bandwidth ({peer_bw / 1e9:.1f} GB/s "
            f"read beside it); best sound "
            f"tokentop mix ({best[0]}, same threads) ÷ llama.cpp = {best[1] / tps:.2f} (target ≥ 0.5)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
