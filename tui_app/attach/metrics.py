"""A server's Prometheus /metrics, read: one scrape parsed (or one line saying why there is none),
and the server's family told from its metric names, else from what only it answers."""

from __future__ import annotations

import httpx

from monitors.redact import redact
from monitors.servers import BY_NAME, OPENAI, EngineTable, MetricsParseError, engine_from_metrics, parse_metrics
from tui_app.attach.errors import describe_failure, describe_status


async def scrape(http: httpx.AsyncClient, url: str, headers: dict, timeout_s: float, engine: EngineTable) -> tuple[dict | None, str]:
    """(the parsed samples, "") or (None, why not: unreachable, no /metrics and how `engine` turns them on, unparsable, empty),
    the URL said without a password or token in it."""
    shown = redact(url)
    try:
        r = await http.get(url, headers=headers, timeout=min(5.0, timeout_s))
    except httpx.HTTPError as exc:
        return None, describe_failure(exc, url, timeout_s)
    if r.status_code in (404, 501):
        return None, f"no Prometheus metrics at {shown}: {engine.enable_metrics}"
    if r.status_code != 200:
        return None, describe_status(r.status_code, r.text, url, "GET /metrics")
    try:
        samples = parse_metrics(r.text)
    except MetricsParseError as exc:
        return None, f"{shown}: {exc}"
    return (samples, "") if samples else (None, f"{shown} is empty")


async def detect(http: httpx.AsyncClient, root: str, headers: dict, samples: dict | None) -> EngineTable:
    """The serving engine's family, from its metric names (`samples`), else from what only it answers."""
    if samples is not None:
        found = engine_from_metrics(set(samples))
        if found is not None:
            return found
    try:
        r = await http.get(root + "/props", headers=headers, timeout=3.0)
        if r.status_code == 200 and "default_generation_settings" in r.text:
            return BY_NAME["llama.cpp"]
        r = await http.get(root + "/api/version", headers=headers, timeout=3.0)
        if r.status_code == 200 and "version" in r.text:
            return BY_NAME["Ollama"]
    except httpx.HTTPError:
        pass
    return OPENAI
