"""A deterministic session (no model, no clock) for snapshot tests and replay tests of the app."""

import math

from monitors.events import Bandwidth, EngineReady, LeverChanged, Levers, Phase, RunFinished, RunStarted, Sampled, Step

MS = 1_000_000
MIB = 2**20


def session_events(runs: int = 3, tokens: int = 60) -> list:
    t = 10_000 * MS
    out = [
        Phase("load", "SmolLM2-135M-Instruct from converted-cache", True, 1.2, t_ns=t),
        EngineReady(
            "SmolLM2-135M-Instruct",
            "converted-cache",
            "cpu",
            "float32",
            134515008,
            538060032,
            30,
            3,
            64,
            4,
            8192,
            1.2,
            1,
            {"int8": "int8 per-channel weights, LM head too (fused when compiled)"},
            None,
            t_ns=t,
        ),
        Bandwidth("off", 538060288, 511377408, 36.0e9, "a read of the fp weights in place (487.7 MiB), the best of 5", t_ns=t),
    ]
    rss = 900 * MIB
    text = "The lighthouse keeper wrote down the weather, the ships, and the small repairs. "
    for run in range(1, runs + 1):
        levers = Levers()
        t += 300 * MS
        out.append(RunStarted(run, levers, 42, tokens, "Write a short story about a robot who learns to paint.", "short", t_ns=t))
        seg = 0
        seq = 42
        for i in range(tokens):
            if i == tokens // 2 and run == 2:
                seg += 1
                levers = Levers(quant="int8")
                out.append(LeverChanged(run, "quant", "int8", levers, seg, t_ns=t))
                out.append(Bandwidth("int8", 135439360, 134479872, 37.8e9, "a read of the int8 weights in place (128.3 MiB), the best of 5", t_ns=t))
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
            out.append(Step(run, i + 1, kind, [100 + i], word, 1, t, dt, dt - 2 * MS, kv, kv, seq, seg))
            if i % 4 == 0:
                out.append(
                    Sampled(
                        t,
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
                run,
                tokens,
                "max tokens",
                text,
                rss + 40 * MIB,
                rss + run * MIB,
                None,
                None,
                24.6 if run != 2 else 24.63,
                None if run != 2 else 37,
                "reference" if run != 2 else "differs at token 37",
                t_ns=t,
            )
        )
    return out
