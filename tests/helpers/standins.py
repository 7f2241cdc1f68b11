"""Metric texts for what cannot run here, written from the exporters' own sources, served to the
real Prometheus by tests/helpers/prometheus.py's StandIns:

- NVIDIA's DCGM exporter (no GPU here): its default counters (etc/default-counters.csv in
  NVIDIA/dcgm-exporter) include `DCGM_FI_DEV_POWER_USAGE` (gauge, W) and
  `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (counter, mJ since boot, written without `_total`),
  each labelled gpu, UUID, pci_bus_id, device, modelName, Hostname and DCGM_FI_DRIVER_VERSION.
  The energy counter here grows at exactly the power it reports, from the moment it is made.
- The vLLM production-stack router (vllm-project/production-stack,
  src/vllm_router/services/metrics_service): its gauges carry a `server` label, one series per
  backend URL (`vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:current_qps`, ...).
- A vLLM replica (the scale case: a hundred of them cannot run here): the `vllm:` gauges,
  counters and histograms tokentop reads, with the `model_name` and `engine` labels vLLM writes.
"""

from __future__ import annotations

import time

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


def dcgm(powers: list[float], host: str = "node-a"):
    """A DCGM exporter's text for GPUs drawing `powers` watts: a function, so that each scrape
    reads the energy counter at that moment (mJ = W × s × 1000 since it was made)."""
    t0 = time.time()
    start_mj = 1_234_567_890.0  # since boot, not since the stand-in: a counter's start is never zero

    def text() -> str:
        lines = ["# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).", "# TYPE DCGM_FI_DEV_POWER_USAGE gauge"]
        labels = [
            f'gpu="{i}",UUID="GPU-{i:08x}-0000-0000-0000-000000000000",pci_bus_id="00000000:{i + 4:02X}:00.0",'
            f'device="nvidia{i}",modelName="NVIDIA H100 80GB HBM3",Hostname="{host}",DCGM_FI_DRIVER_VERSION="570.86.15"'
            for i in range(len(powers))
        ]
        lines += [f"DCGM_FI_DEV_POWER_USAGE{{{lab}}} {p:.6f}" for lab, p in zip(labels, powers, strict=True)]
        lines += [
            "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).",
            "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
        ]
        elapsed = time.time() - t0
        lines += [f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{lab}}} {start_mj + p * elapsed * 1000:.0f}" for lab, p in zip(labels, powers, strict=True)]
        return "\n".join(lines) + "\n"

    return text


def dcgm_memory(pods: dict[str, tuple[float, float]], host: str = "node-a"):
    """A DCGM exporter's framebuffer gauge (`DCGM_FI_DEV_FB_USED`, MiB) under its Kubernetes pod
    mapping: a GPU per entry of `pods`, pod name → (MiB, MiB a second it rises by). A name given as
    `exported_pod=NAME` is written under that label, as Prometheus renames the exporter's own `pod`
    where the target has one."""
    t0 = time.time()

    def text() -> str:
        t = time.time() - t0
        lines = ["# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).", "# TYPE DCGM_FI_DEV_FB_USED gauge"]
        for i, (pod, (mib, per_s)) in enumerate(pods.items()):
            label = pod if "=" in pod else f"pod={pod}"
            name, value = label.split("=")
            labels = f'gpu="{i}",UUID="GPU-{i:08x}-0000-0000-0000-000000000000",device="nvidia{i}",modelName="NVIDIA H100 80GB HBM3",Hostname="{host}",'
            labels += f'container="vllm",namespace="serving",{name}="{value}"'
            lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {mib + per_s * t:.0f}")
        return "\n".join(lines) + "\n"

    return text


def router(backends: dict[str, tuple[int, int]]) -> str:
    """The production-stack router's per-backend gauges: backend URL → (running, waiting)."""
    lines = []
    for name, help_, idx in (
        ("vllm:num_requests_running", "Number of running requests", 0),
        ("vllm:num_requests_waiting", "Number of waiting requests", 1),
    ):
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
        lines += [f'{name}{{server="{url}"}} {float(v[idx])}' for url, v in backends.items()]
    lines += ["# HELP vllm:current_qps Current Queries Per Second", "# TYPE vllm:current_qps gauge"]
    lines += [f'vllm:current_qps{{server="{url}"}} 0.0' for url in backends]
    return "\n".join(lines) + "\n"


def vllm_replica(
    i: int,
    running: int = 2,
    waiting: int = 0,
    gen_tps: float = 100.0,
    ttft_s: float = 0.05,
    every_s: float = 1.0,
    kv: float | None = None,
    engines: int = 1,
    rss_mb: float | None = None,
    rss_mb_per_s: float = 0.0,
    gen_tps_per_s: float = 0.0,
):
    """A vLLM replica's text whose counters grow at fixed rates (gen_tps tokens/s, rising by
    gen_tps_per_s each second; a request every every_s seconds whose TTFT is ttft_s), for each of
    `engines` data-parallel engines (vLLM's `engine` label), and with rss_mb the process's
    resident memory as prometheus_client writes it, rising by rss_mb_per_s: a function, read at
    each scrape."""
    t0 = time.time()
    usage = 0.1 + (i % 9) / 10 if kv is None else kv

    def text() -> str:
        t = time.time() - t0
        requests = int(t / every_s)
        models = [f'model_name="smollm2",engine="{e}"' for e in range(engines)]
        series = {
            "vllm:num_requests_running": ("gauge", running),
            "vllm:num_requests_waiting": ("gauge", waiting),
            "vllm:kv_cache_usage_perc": ("gauge", round(usage, 2)),
            "vllm:prompt_tokens_total": ("counter", int(t * gen_tps / 4)),
            "vllm:generation_tokens_total": ("counter", int(t * gen_tps + gen_tps_per_s * t * t / 2)),
            "vllm:num_preemptions_total": ("counter", 0),
        }
        lines = []
        for name, (kind, value) in series.items():
            lines.append(f"# TYPE {name} {kind}")
            lines += [f"{name}{{{m}}} {value}" for m in models]
        lines.append("# TYPE vllm:time_to_first_token_seconds histogram")
        for m in models:
            for le in TTFT_BUCKETS:
                lines.append(f'vllm:time_to_first_token_seconds_bucket{{{m},le="{le}"}} {requests if le >= ttft_s else 0}')
            lines += [
                f'vllm:time_to_first_token_seconds_bucket{{{m},le="+Inf"}} {requests}',
                f"vllm:time_to_first_token_seconds_count{{{m}}} {requests}",
                f"vllm:time_to_first_token_seconds_sum{{{m}}} {requests * ttft_s}",
            ]
        if rss_mb is not None:
            lines += ["# TYPE process_resident_memory_bytes gauge", f"process_resident_memory_bytes {(rss_mb + rss_mb_per_s * t) * 2**20:.1f}"]
        return "\n".join(lines) + "\n"

    return text
