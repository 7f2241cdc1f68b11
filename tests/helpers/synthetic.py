"""A deterministic session (no model, no clock) for snapshot tests and replay tests of the app."""

import math

from monitors.events import Bandwidth, EngineReady, LeverChanged, Levers, Phase, RunFinished, RunStarted, Sampled, Step

MS = 1_000_000
MIB = 2**20


def session_events(runs: int = 3, tokens: int = 60) -> list:
    t = 10_000 * MS
    out = [
        Phase(name="load", detail="SmolLM2-135M-Instruct from converted-cache", done=True, seconds=1.2, t_ns=t),
        EngineReady(
            model="SmolLM2-135M-Instruct",
            source="converted-cache",
            device="cpu",
            dtype="float32",
            n_params=134515008,
            weight_bytes=538060032,
            n_layers=30,
            kv_heads=3,
            head_dim=64,
            kv_bytes_per_elem=4,
            context_len=8192,
            load_s=1.2,
            threads=1,
            quant_impl={"int8": "int8 per-channel weights, LM head too (fused when compiled)"},
            perplexity=None,
            t_ns=t,
        ),
        Bandwidth(
            quant="off",
            weight_bytes=538060288,
            read_bytes=511377408,
            read_bps=36.0e9,
            source="a read of the fp weights in place (487.7 MiB), the best of 5",
            t_ns=t,
        ),
    ]
    rss = 900 * MIB
    text = "The lighthouse keeper wrote down the weather, the ships, and the small repairs. "
    for run in range(1, runs + 1):
        levers = Levers()
        t += 300 * MS
        out.append(
            RunStarted(
                run_id=run,
                levers=levers,
                prompt_tokens=42,
                max_new_tokens=tokens,
                prompt_text="Write a short story about a robot who learns to paint.",
                preset="short",
                t_ns=t,
            )
        )
        seg = 0
        seq = 42
        for i in range(tokens):
            if i == tokens // 2 and run == 2:
                seg += 1
                levers = Levers(quant="int8")
                out.append(LeverChanged(run_id=run, lever="quant", value="int8", levers=levers, segment=seg, t_ns=t))
                out.append(
                    Bandwidth(
                        quant="int8",
                        weight_bytes=135439360,
                        read_bytes=134479872,
                        read_bps=37.8e9,
                        source="a read of the int8 weights in place (128.3 MiB), the best of 5",
                        t_ns=t,
                    )
                )
                kind, dt = "reprefill", 180 * MS
            elif i == 0:
                kind, dt = "prefill", 210 * MS
            else:
                kind = "decode"
                base = 42 if levers.quant == "int8" else 57
                dt = int((base + 6 * math.sin(i / 3) + 0.05 * seq) * MS)
            t += dt
            seq += 1
            word = text.split(" ")[i % 14] + " "
            kv = 2 * 4 * seq * 30 * 3 * 64
            out.append(
                Step(
                    run_id=run,
                    step=i + 1,
                    kind=kind,
                    token_ids=[100 + i],
                    text=word,
                    n_tokens=1,
                    t_ns=t,
                    dt_ns=dt,
                    forward_ns=dt - 2 * MS,
                    kv_bytes=kv,
                    kv_alloc_bytes=kv,
                    seq_len=seq,
                    segment=seg,
                )
            )
            if i % 4 == 0:
                out.append(
                    Sampled(
                        t_ns=t,
                        engine_rss=rss + i * MIB // 4,
                        engine_cpu=98.0 + (i % 3),
                        app_rss=280 * MIB,
                        app_cpu=6.0 + (i % 4),
                        sys_cpu=55.0 + (i % 5),
                        sys_mem_used=6 * 2**30,
                        sys_mem_total=24 * 2**30,
                        gpu_reason="n/a: NVML unavailable (Driver Not Loaded)",
                    )
                )
        out.append(
            RunFinished(
                run_id=run,
                n_tokens=tokens,
                stop_reason="max tokens",
                text=text,
                peak_rss=rss + 40 * MIB,
                baseline_rss=rss + run * MIB,
                torch_peak=None,
                gpu_baseline=None,
                perplexity=24.6 if run != 2 else 24.63,
                first_diff=None if run != 2 else 37,
                diff_note="reference" if run != 2 else "differs at token 37",
                t_ns=t,
            )
        )
    return out


def timed_run(run_id: int, levers: Levers, step_ms: float, tokens: int = 20, prompt: int = 40, stop: str = "max tokens") -> list:
    """A run at a steady pace: a 100 ms first token, then a token every `step_ms`."""
    t = run_id * 10_000 * MS
    out: list = [RunStarted(run_id=run_id, levers=levers, prompt_tokens=prompt, max_new_tokens=tokens, prompt_text="p", t_ns=t)]
    for i in range(tokens):
        dt = round((100 if i == 0 else step_ms) * MS)
        t += dt
        kind = "prefill" if i == 0 else "decode"
        sizes = {"kv_bytes": 0, "kv_alloc_bytes": 0, "seq_len": prompt + i}
        out.append(Step(run_id=run_id, step=i + 1, kind=kind, token_ids=[1], text="a", n_tokens=1, t_ns=t, dt_ns=dt, forward_ns=dt, **sizes))
    fields = {"torch_peak": None, "gpu_baseline": None, "perplexity": None, "first_diff": None, "diff_note": ""}
    out.append(RunFinished(run_id=run_id, n_tokens=tokens, stop_reason=stop, text="", peak_rss=0, baseline_rss=0, t_ns=t, **fields))
    return out


def energy_run(session, sampler, counter, clock=None) -> None:
    """A run of timed_run's (0.1 s, then 19 tokens 20 ms apart) sampled four times while an energy
    counter (a sysfs file of µJ) rises 0, 10, 3 and 3 J: the power taken as even between samples,
    2 + 3 + 0.8 J of it are the run's. `clock` (with `ns`), where the reader times its readings."""
    from monitors.sampler import to_event

    def sample(at_ns: int, rise_j: float) -> None:
        counter.write_text(str(int(counter.read_text()) + round(rise_j * 1e6)))
        if clock is not None:
            clock.ns = at_ns
        ev = to_event(sampler.sample_once())
        ev.t_ns = at_ns
        session.feed(ev)

    started, *steps, finished = timed_run(1, Levers(), step_ms=20)
    t0, t1 = started.t_ns, finished.t_ns
    sample(t0 - 400_000_000, 0)
    session.feed(started)
    sample(t0 + 100_000_000, 10)  # 10 J over 0.5 s, the last 0.1 s of them the run's: 2 J
    for step in steps:
        session.feed(step)
    sample(t0 + 400_000_000, 3)  # wholly the run's: 3 J
    session.feed(finished)
    sample(t1 + 220_000_000, 3)  # 0.3 s, of which the run's 0.08 s: 0.8 J


KV_PER_TOKEN = 2 * 4 * 30 * 3 * 64  # the default model's bytes a cached token (fp32), as session_events' EngineReady says


def batch_step(kind: str, rows: list[list[int]], waiting: int, made: int, ms: int, run_id: int = 1, step: int = 1, t_ns: int = 0) -> Step:
    """A step of a batch of distinct prompts as the engine emits it: rows [number, prompt, new, max
    new], its cache padded to the longest row (each row's own tokens all but its newest)."""
    own = [prompt + new - 1 for _, prompt, new, _ in rows]
    return Step(
        run_id=run_id,
        step=step,
        kind=kind,
        token_ids=[1],
        text="a",
        n_tokens=1,
        t_ns=t_ns,
        dt_ns=ms * MS,
        forward_ns=1,
        kv_bytes=KV_PER_TOKEN * sum(own),
        kv_alloc_bytes=KV_PER_TOKEN * len(rows) * max(own),
        seq_len=max(own),
        batch=rows,
        waiting=waiting,
        batch_tokens=made,
    )
