"""The client of an attached server: streams requests through its OpenAI-compatible API and scrapes
its Prometheus /metrics, and turns both into the events the in-process engine emits.

Timing rule (the same in the app, the README and the tests): TTFT runs from sending the request
to the first chunk that carries text; each later chunk that brings tokens is one step, its latency
the gap since the stream's previous such chunk. Tokens are the server's own running count where
the stream carries one (llama.cpp `timings.predicted_n`, vLLM and SGLang `continuous_usage_stats`),
so a chunk holding k tokens (speculative decoding, a stream interval) is one step of k tokens whose
gap is spread over them, as the engine spreads a speculative verify step; elsewhere each chunk with
text counts as one token, the run says so, and the server's final count is shown beside it.

It runs in its own process beside the UI (like the engine), so a redraw never delays a chunk's
timestamp and a stalled server never stalls a frame.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import queue
import time
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

import httpx
from httpx_sse import SSEError, aconnect_sse

from monitors.events import (
    EngineError,
    EngineReady,
    LeverChanged,
    LeverRefused,
    Levers,
    RequestSent,
    RunFinished,
    RunStarted,
    ServerSample,
    ServerTiming,
    Step,
    now_ns,
)
from monitors.redact import redact
from monitors.servers import BY_NAME, OPENAI, EngineTable, MetricsParseError, MetricsWindow, Quantiles, engine_from_metrics, parse_metrics
from monitors.xray import from_timings, from_usage

CONCURRENCY = (1, 2, 4, 8, 16, 32)
# The levers a server sets when it starts; a client cannot switch them.
SERVER_OWNED = {
    "cache": "the KV cache",
    "compile": "compilation / CUDA graphs",
    "quant": "the weights' format",
    "spec": "speculative decoding",
}
STOP_REASONS = {"stop": "eos", "length": "max tokens", "eos_token": "eos", "abort": "stopped"}


@dataclass
class AttachConfig:
    url: str  # the API's base, ending in /v1
    model: str | None = None
    metrics_url: str | None = None
    api_key_env: str | None = None  # the key itself is read from the environment, never stored
    insecure: bool = False
    chat: bool = True
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    concurrency: int = 1
    timeout_s: float = 30.0  # a stream silent this long is stalled
    metrics_hz: float = 1.0
    label: str = ""
    first_run_id: int = 1  # run numbers go on across a reconnect
    otlp: str | None = None  # HOST:PORT of the OTLP receiver for the servers' spans (tui_app/attach/otlp.py), None: off
    otlp_grace_s: float = 15.0  # how long a span may come after its stream's end before "no server span" is said


class AttachError(Exception):
    """Why the server cannot be used; one line for the user."""


def api_base(url: str) -> str:
    """The OpenAI API's base for a server URL: scheme added when missing, `/v1` when absent."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AttachError(f"{redact(url)!r} is not an http(s) URL (example: http://127.0.0.1:8000)")
    return url if parts.path.endswith("/v1") else url + "/v1"


def server_root(base: str) -> str:
    return base[: -len("/v1")] if base.endswith("/v1") else base


def host_port(url: str) -> str:
    p = urlsplit(url)
    return f"{p.hostname}:{p.port or (443 if p.scheme == 'https' else 80)}"


def describe_failure(exc: Exception, url: str, timeout_s: float) -> str:
    """One line for a failed request, naming the URL and what to do; never the request's headers,
    nor a password or token in the URL."""
    where = host_port(url)
    url, text = redact(url), redact(str(exc))
    if isinstance(exc, httpx.ConnectTimeout):
        return f"no answer from {where} within the connect timeout: is the host right and reachable?"
    if isinstance(exc, httpx.ConnectError):
        if "CERTIFICATE" in text.upper() or "SSL" in text.upper():
            return f"{where}: its TLS certificate is not trusted (self-signed?); pass --insecure to accept it"
        if "Name or service not known" in text or "nodename nor servname" in text or "Temporary failure in name resolution" in text:
            return f"cannot resolve the host of {url}: check the URL"
        return f"cannot reach {where}: connection refused (is the server running, on this port?)"
    if isinstance(exc, httpx.ReadTimeout):
        return f"{where} sent nothing for {timeout_s:g} s: the stream stalled (--timeout sets the limit)"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return f"{where} closed the connection mid-stream (the server stopped, or the network dropped it)"
    if isinstance(exc, httpx.HTTPError):
        return f"{where}: {type(exc).__name__}: {text[:200]}"
    return f"{where}: {type(exc).__name__}: {text[:200]}"


def describe_status(code: int, body: str, url: str, what: str) -> str:
    where = host_port(url)
    url = redact(url)
    if code in (401, 403):
        return f"{where} answered {code} to {what}: the API key is missing or wrong (set it in OPENAI_API_KEY, or name the variable with --api-key-env)"
    if code == 404:
        return f"{where} answered 404 to {what}: not an OpenAI-compatible API at {url} (is the URL the server's base?)"
    detail = redact(_error_text(body))
    return f"{where} answered {code} to {what}" + (f": {detail}" if detail else "")


def _error_text(body: str) -> str:
    """The message of an OpenAI-style error body, or its start."""
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, TypeError):
        return body.strip().splitlines()[0][:200] if body.strip() else ""
    err = obj.get("error", obj) if isinstance(obj, dict) else obj
    if isinstance(err, dict):
        return str(err.get("message") or err.get("detail") or err)[:200]
    return str(err)[:200]


@dataclass
class StreamResult:
    text: str = ""
    counted: int = 0  # tokens counted from the stream (server running count, or chunks)
    chunks: int = 0
    from_server: bool = False  # counts came from the server's running count
    finish: str | None = None
    usage: dict | None = None
    timings: dict | None = None
    malformed: int = 0
    error: str = ""
    context: int = 0  # tokens in this stream's context now (prompt + cached + generated), when known


def _json_safe(values: dict) -> dict:
    out = {}
    for k, v in values.items():
        if isinstance(v, Quantiles):
            v = {"p50": v.p50, "p95": v.p95, "p99": v.p99, "mean": v.mean, "n": v.n}
        if isinstance(v, float) and math.isnan(v):
            v = None
        if isinstance(v, dict):
            v = {a: (None if isinstance(b, float) and math.isnan(b) else b) for a, b in v.items()}
        out[k] = v
    return out


class ServerClient:
    def __init__(self, cfg: AttachConfig, emit):
        self.cfg = cfg
        self.emit = emit
        self.base = api_base(cfg.url)
        self.root = server_root(self.base)
        self.metrics_url = cfg.metrics_url or self.root + "/metrics"
        # What is shown, logged and recorded of the two: a password or token in them as ***.
        self.shown_root, self.shown_metrics = redact(self.root), redact(self.metrics_url)
        self.engine: EngineTable = OPENAI
        self.model = cfg.model
        self.levers = Levers(batch=cfg.concurrency, server=cfg.label)
        self.pid: int | None = None
        self.n_ctx: int | None = None
        self.run_id = cfg.first_run_id - 1
        self._references: dict[tuple, str] = {}
        self._inflight: list[StreamResult] = []  # every stream now open, of every run (a bench runs several)
        self._metrics_error = ""
        self.joiner = None  # the OTLP span joiner (Servers starts it with --otlp)
        self.trace_headers = True  # off only where the server rejected them
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(cfg.timeout_s, connect=5.0),
            verify=not cfg.insecure,
            limits=httpx.Limits(max_connections=max(CONCURRENCY) + 4),
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    # ------------------------------------------------------------ connecting
    async def _get(self, url: str, what: str, timeout: float | None = None) -> httpx.Response:
        try:
            return await self.http.get(url, headers=self._headers, timeout=timeout or self.cfg.timeout_s)
        except httpx.HTTPError as exc:
            raise AttachError(describe_failure(exc, url, self.cfg.timeout_s)) from None

    async def connect(self) -> EngineReady:
        """Ask the server what it serves and what it is; AttachError says why it cannot be used."""
        t0 = time.perf_counter()
        r = await self._get(self.base + "/models", "GET /v1/models")
        if r.status_code != 200:
            raise AttachError(describe_status(r.status_code, r.text, self.base, "GET /v1/models"))
        try:
            data = r.json()
            models = [m for m in data["data"] if isinstance(m, dict) and "id" in m]
        except (ValueError, KeyError, TypeError):
            kind = r.headers.get("content-type", "?").split(";")[0]
            raise AttachError(
                f"{host_port(self.base)}: GET /v1/models answered {kind}, not a model list: not an OpenAI-compatible API at {redact(self.base)}"
            ) from None
        ids = [m["id"] for m in models]
        if not ids:
            raise AttachError(f"{host_port(self.base)} serves no model (GET /v1/models is empty)")
        if self.model is None:
            self.model = ids[0]
        elif self.model not in ids:
            raise AttachError(f"{host_port(self.base)} has no model {self.model!r}; it serves: {', '.join(ids)}")
        meta = next((m.get("meta") or {} for m in models if m["id"] == self.model), {})
        self.engine = await self._detect()
        self.window = MetricsWindow(self.engine)
        self.n_ctx = meta.get("n_ctx") or next((m.get("max_model_len") for m in models if m["id"] == self.model), None)
        from tui_app.attach.discover import local_pid

        self.pid = local_pid(self.root)
        if not self.cfg.label:
            self.levers = Levers(batch=self.cfg.concurrency, server=f"{host_port(self.base)}")
        ready = EngineReady(
            model=self.model,
            source=self.shown_root,
            device=self.engine.name,
            dtype="server",
            n_params=int(meta.get("n_params") or 0),
            weight_bytes=int(meta.get("size") or 0),
            n_layers=0,
            kv_heads=0,
            head_dim=0,
            kv_bytes_per_elem=0,
            context_len=int(self.n_ctx or 0),
            load_s=time.perf_counter() - t0,
            threads=0,
            server={
                "engine": self.engine.name,
                "url": self.shown_root,
                "metrics_url": self.shown_metrics,
                "label": self.levers.server,
                "pid": self.pid,
                "kv_note": self.engine.kv_note,
                "chat": self.cfg.chat,
                "concurrency": list(CONCURRENCY),
                "server_owned": SERVER_OWNED,
            },
        )
        self.emit(ready)
        return ready

    async def _detect(self) -> EngineTable:
        """The engine family, from its metric names, else from what only it answers."""
        samples, _ = await self._scrape()
        if samples is not None:
            found = engine_from_metrics(set(samples))
            if found is not None:
                return found
        try:
            r = await self.http.get(self.root + "/props", headers=self._headers, timeout=3.0)
            if r.status_code == 200 and "default_generation_settings" in r.text:
                return BY_NAME["llama.cpp"]
            r = await self.http.get(self.root + "/api/version", headers=self._headers, timeout=3.0)
            if r.status_code == 200 and "version" in r.text:
                return BY_NAME["Ollama"]
        except httpx.HTTPError:
            pass
        return OPENAI

    # ------------------------------------------------------------ /metrics
    async def _scrape(self) -> tuple[dict | None, str]:
        """One parse of /metrics, or (None, why not)."""
        try:
            r = await self.http.get(self.metrics_url, headers=self._headers, timeout=min(5.0, self.cfg.timeout_s))
        except httpx.HTTPError as exc:
            return None, describe_failure(exc, self.metrics_url, self.cfg.timeout_s)
        if r.status_code in (404, 501):
            return None, f"no Prometheus metrics at {self.shown_metrics}: {self.engine.enable_metrics}"
        if r.status_code != 200:
            return None, describe_status(r.status_code, r.text, self.metrics_url, "GET /metrics")
        try:
            samples = parse_metrics(r.text)
        except MetricsParseError as exc:
            return None, f"{self.shown_metrics}: {exc}"
        return (samples, "") if samples else (None, f"{self.shown_metrics} is empty")

    async def sample(self) -> ServerSample | None:
        """A scrape as figures, emitted; why there is none is said once, and its return too."""
        samples, error = await self._scrape()
        if error != self._metrics_error:
            if error or self._metrics_error:
                self.emit(ServerSample(now_ns(), {}, {}, error=error or f"{self.shown_metrics} answers again", server=self.levers.server))
            self._metrics_error = error
        values: dict = {}
        sources: dict = {}
        if samples is not None:
            self.window.add(samples)
            values, sources = self.window.figures()
        if "kv_usage" not in values and self.n_ctx and self._inflight:
            # llama.cpp: each slot holds one stream's context; ours are the streams in flight.
            used = [s.context for s in self._inflight if s.context]
            if used:
                values["kv_usage"] = sum(used) / (self.n_ctx * len(self._inflight))
                sources["kv_usage"] = f"timings: our streams' context ÷ n_ctx {self.n_ctx}"
        if samples is None and not values:
            return None
        ev = ServerSample(now_ns(), _json_safe(values), sources, server=self.levers.server)
        self.emit(ev)
        return ev

    async def metrics_loop(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(1.0 / max(self.cfg.metrics_hz, 0.1))

    # ------------------------------------------------------------ levers
    def set_lever(self, name: str, value) -> None:
        if name in SERVER_OWNED:
            self.emit(
                LeverRefused(
                    name,
                    value,
                    f"{SERVER_OWNED[name]} is set when the {self.engine.name} server starts: restart it with the option, "
                    "or attach to a second server started with it and compare",
                )
            )
            return
        if name == "batch":
            if value not in CONCURRENCY:
                self.emit(LeverRefused(name, value, f"concurrency must be one of {', '.join(map(str, CONCURRENCY))}"))
                return
            self.levers = Levers(batch=value, server=self.levers.server)
            # Streams in flight keep going; the next run opens this many.
            self.emit(LeverChanged(None, "batch", value, self.levers))
            return
        self.emit(LeverRefused(name, value, f"{name} is not a lever of an attached server"))

    # ------------------------------------------------------------ runs
    def _body(self, text: str, req) -> dict:
        body: dict = {"model": self.model, "stream": True, "max_tokens": req.max_new_tokens, "temperature": self.cfg.temperature}
        if self.cfg.top_p < 1.0:
            body["top_p"] = self.cfg.top_p
        if self.cfg.temperature > 0:
            body["seed"] = self.cfg.seed
        if self.cfg.chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        if req.ignore_eos:
            body["ignore_eos"] = True  # vLLM, SGLang and llama.cpp honour it; OpenAI itself does not
        body.update(json.loads(json.dumps(self.engine.stream_extras)))
        return body

    async def run(self, req) -> RunFinished | None:
        from tui_app.prompts import preset_prompt

        try:
            text = req.prompt if req.prompt is not None else preset_prompt(req.preset, req.prompt_file)
        except ValueError as exc:
            self.emit(EngineError(str(exc)))
            return None
        if not text.strip():
            self.emit(EngineError("the prompt is empty; type some text or choose a preset"))
            return None
        self.run_id += 1
        run_id = self.run_id
        levers = self.levers
        body = self._body(text, req)
        url = self.base + ("/chat/completions" if self.cfg.chat else "/completions")
        started = RunStarted(run_id, levers, 0, req.max_new_tokens, text, req.preset if req.prompt is None else "custom")
        streams = [StreamResult() for _ in range(levers.batch)]
        self._inflight.extend(streams)
        self.emit(started)
        tasks = [asyncio.create_task(self._stream(k, url, body, started.t_ns, run_id, streams[k])) for k in range(levers.batch)]
        stopped = False
        try:
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            stopped = True
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._inflight = [s for s in self._inflight if all(s is not t for t in streams)]
        return self._finish(run_id, req, body, streams, stopped)

    def _trace(self, run_id: int, k: int, t0: int) -> tuple[str, dict]:
        """A fresh W3C trace for one stream: its id and the headers that carry it, said as RequestSent."""
        trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
        request_id = f"tokentop-{run_id}.{k}-{trace_id[:12]}"
        self.emit(RequestSent(run_id, k, trace_id, request_id, time.time_ns(), t0))
        if not self.trace_headers:
            return trace_id, {}
        if self.joiner is not None:
            self.joiner.expect(trace_id, run_id, k, span_id)
        return trace_id, {"traceparent": f"00-{trace_id}-{span_id}-01", "x-request-id": request_id}

    async def _stream(self, k: int, url: str, body: dict, t0: int, run_id: int, out: StreamResult) -> None:
        trace_id, trace = self._trace(run_id, k, t0)
        try:
            for attempt in (trace, {}):
                async with aconnect_sse(self.http, "POST", url, json=body, headers={**self._headers, **attempt}) as es:
                    r = es.response
                    if r.status_code != 200:
                        await r.aread()
                        if attempt and r.status_code in (400, 431) and await self._rejects_trace(url, body):
                            continue
                        out.error = describe_status(r.status_code, r.text, url, f"POST {urlsplit(url).path}")
                        return
                    await self._read(es, k, t0, run_id, out)
                    break
        except httpx.HTTPError as exc:
            out.error = describe_failure(exc, url, self.cfg.timeout_s)
        except SSEError:
            out.error = f"{host_port(url)} did not answer with a stream (Content-Type is not text/event-stream)"
        finally:
            self._account(run_id, k, trace_id, out)

    async def _rejects_trace(self, url: str, body: dict) -> bool:
        """Whether a request refused with our trace headers goes through without them (a short one,
        not streamed): if so, they are left off from now on, and the user told."""
        if not self.trace_headers:
            return True
        probe = {**body, "stream": False, "max_tokens": 1}
        probe.pop("stream_options", None)
        try:
            r = await self.http.post(url, json=probe, headers=dict(self._headers))
        except httpx.HTTPError:
            return False
        if r.status_code != 200:
            return False
        self.trace_headers = False
        what = f"{host_port(url)} rejects the traceparent and x-request-id headers"
        self.emit(EngineError(f"{what}: requests go on without them, so no server span can be joined"))
        return True

    def _account(self, run_id: int, k: int, trace_id: str, out: StreamResult) -> None:
        """The response's own account of the stream (llama.cpp's timings, a usage block), and the start
        of its span's grace period."""
        if out.timings:
            phases, sources, details = from_timings(out.timings)
            self.emit(ServerTiming(run_id, k, trace_id, "timings", phases, sources, details))
        elif out.usage:
            self.emit(ServerTiming(run_id, k, trace_id, "usage", {}, {}, from_usage(out.usage)))
        if self.joiner is not None:
            self.joiner.ended(trace_id)

    async def _read(self, es, k: int, t0: int, run_id: int, out: StreamResult) -> None:
        t_prev = t0
        first = True
        pending = ""
        prompt_n = None
        step = 0
        async for sse in es.aiter_sse():
            t = now_ns()
            data = sse.data.strip()
            if not data:
                continue
            if data == "[DONE]":
                break
            try:
                obj = json.loads(data)
            except json.JSONDecodeError:
                out.malformed += 1
                continue
            if not isinstance(obj, dict):
                out.malformed += 1
                continue
            if obj.get("error"):
                out.error = f"the server sent an error mid-stream: {_error_text(json.dumps(obj))}"
                return
            choices = obj.get("choices") or []
            usage, timings = obj.get("usage"), obj.get("timings")
            if usage:
                out.usage = usage
            running = None
            if isinstance(timings, dict):
                out.timings = timings
                running = timings.get("predicted_n")
                prompt_n = (timings.get("prompt_n") or 0) + (timings.get("cache_n") or 0)
            elif isinstance(usage, dict) and choices:  # continuous usage stats: a running count on each chunk
                running = usage.get("completion_tokens")
                prompt_n = usage.get("prompt_tokens")
            if not choices or not isinstance(choices[0], dict):
                continue
            c = choices[0]
            delta = c.get("delta")
            text = (delta.get("content") if isinstance(delta, dict) else None) or c.get("text") or ""
            if c.get("finish_reason"):
                out.finish = c["finish_reason"]
            out.chunks += 1 if text else 0
            if running is not None:
                n = max(int(running) - out.counted, 0)
                out.from_server = True
            else:
                n = 1 if text else 0
            if n == 0:
                pending += text  # text without a token of its own goes out with the next token
                continue
            out.counted += n
            out.text += pending + text
            if prompt_n is not None:
                out.context = prompt_n + out.counted
            step += 1
            self.emit(
                Step(
                    run_id,
                    step,
                    "prefill" if first else "decode",
                    [],
                    pending + text,
                    n,
                    t,
                    t - t_prev,
                    0,
                    0,
                    0,
                    out.context,
                    segment=k,
                )
            )
            pending = ""
            first = False
            t_prev = t
        if pending:
            out.text += pending

    def _finish(self, run_id: int, req, body: dict, streams: list[StreamResult], stopped: bool) -> RunFinished:
        lead = streams[0]
        errors = [s.error for s in streams if s.error]
        for e in dict.fromkeys(errors):
            self.emit(EngineError(e))
        malformed = sum(s.malformed for s in streams)
        if malformed:
            self.emit(EngineError(f"{malformed} stream line(s) were not JSON and were skipped"))
        if stopped:
            reason = "stopped"
        elif lead.error:
            reason = "error"
        else:
            reason = STOP_REASONS.get(lead.finish or "", lead.finish or "stream ended")
        server_counts = [_server_total(s) for s in streams]
        n_tokens = sum(c if c is not None else s.counted for c, s in zip(server_counts, streams, strict=True))
        usage = lead.usage or {}
        prompt_tokens = usage.get("prompt_tokens")
        if prompt_tokens is None and lead.timings:
            prompt_tokens = (lead.timings.get("prompt_n") or 0) + (lead.timings.get("cache_n") or 0)
        details = {
            "tokens_from": "server running count" if lead.from_server else "chunks (the server streams no running count)",
            "chunks": lead.chunks,
            "server_tokens": server_counts[0],
            "cached_tokens": ((usage.get("prompt_tokens_details") or {}).get("cached_tokens") if usage else None)
            if not lead.timings
            else lead.timings.get("cache_n"),
        }
        if lead.timings:
            for key in ("prompt_ms", "prompt_n", "predicted_ms", "predicted_n", "predicted_per_token_ms", "predicted_per_second"):
                details[key] = lead.timings.get(key)
        note = self._compare(body, req, lead, reason)
        if not lead.from_server and server_counts[0] is not None and server_counts[0] != lead.counted:
            note += f"; {lead.counted} chunks, {server_counts[0]} tokens (server)"
        from tui_app.attach.discover import process_rss

        rss = process_rss(self.pid)
        if rss is None and self.window.scrapes:  # a remote server that exports its own
            exported = self.window.figures()[0].get("rss")
            rss = int(exported) if exported is not None else None
        ev = RunFinished(
            run_id,
            n_tokens,
            reason,
            lead.text,
            rss,
            rss,
            None,
            None,
            None,
            None,
            note,
            prompt_tokens=prompt_tokens,
            server=details,
        )
        self.emit(ev)
        return ev

    def _compare(self, body: dict, req, lead: StreamResult, reason: str) -> str:
        """Greedy output against this server's first greedy answer to the same request: a server
        that batches or runs speculation may not be deterministic, and this shows it."""
        if self.cfg.temperature > 0:
            return "sampled: not compared"
        if reason not in ("eos", "max tokens"):
            return reason
        key = (self.levers.server, json.dumps(body.get("messages") or body.get("prompt")), req.max_new_tokens, req.ignore_eos)
        ref = self._references.get(key)
        if ref is None:
            self._references[key] = lead.text
            return "reference"
        if ref == lead.text:
            return "identical"
        at = next((i for i, (a, b) in enumerate(zip(ref, lead.text, strict=False)) if a != b), min(len(ref), len(lead.text)))
        return f"differs at char {at}"


class Servers:
    """Up to four attached servers behind one command loop, for comparing them: runs go to the
    active one (`t` moves to the next), run numbers are shared, each server's /metrics is scraped."""

    def __init__(self, configs: list[AttachConfig], emit):
        self.emit = emit
        self.clients = [ServerClient(c, emit) for c in configs]
        self.active = 0
        self.next_run_id = configs[0].first_run_id
        self.otlp = None  # (receiver, joiner, its task) with --otlp

    @property
    def client(self) -> ServerClient:
        return self.clients[self.active]

    async def connect(self) -> None:
        for c in self.clients:
            await c.connect()
        if len(self.clients) > 1:  # the first server is where runs start
            self.emit(LeverChanged(None, "server", self.client.levers.server, self.client.levers))
        cfg = self.clients[0].cfg
        if cfg.otlp is not None and self.otlp is None:
            self.start_otlp(cfg.otlp, cfg.otlp_grace_s)

    def start_otlp(self, address: str, grace_s: float) -> None:
        """The OTLP receiver for every attached server's spans; where it cannot listen, one line
        says why and the servers are watched without it."""
        from tui_app.attach import otlp

        try:
            receiver, joiner = otlp.start(address, asyncio.get_running_loop(), self.emit, grace_s)
        except (otlp.ReceiverError, ValueError) as exc:
            self.emit(EngineError(str(exc)))
            return
        for c in self.clients:
            c.joiner = joiner
        self.otlp = (receiver, joiner, asyncio.create_task(joiner.run()))
        joiner.tick()

    async def run(self, req) -> RunFinished | None:
        c = self.client
        c.run_id = self.next_run_id - 1
        fin = await c.run(req)
        self.next_run_id = c.run_id + 1
        return fin

    def set_lever(self, name: str, value) -> None:
        if name == "server":
            labels = [c.levers.server for c in self.clients]
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= len(labels):
                value = labels[value - 1]  # a tour names a server by its place among the URLs
            if value not in labels:
                self.emit(LeverRefused(name, value, "t moves between attached servers: attach to two or more (tokentop attach URL_A URL_B)"))
                return
            self.active = labels.index(value)
            self.emit(LeverChanged(None, "server", value, self.client.levers))
            return
        self.client.set_lever(name, value)
        if name == "batch":  # one concurrency for every server, so their runs compare
            for c in self.clients:
                c.levers = replace(c.levers, batch=self.client.levers.batch)

    async def aclose(self) -> None:
        if self.otlp is not None:
            receiver, joiner, task = self.otlp
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            joiner.tick()  # the spans that came in the last second
            receiver.close()
            self.otlp = None
        for c in self.clients:
            await c.aclose()

    async def serve(self, commands) -> None:
        """Commands in (run, stop, lever, pause, resume, shutdown), events out, until shutdown."""
        loop = asyncio.get_running_loop()
        try:
            await self.connect()
        except AttachError as exc:
            self.emit(EngineError(str(exc), fatal=True))
            await self.aclose()
            return
        metrics = [asyncio.create_task(c.metrics_loop()) for c in self.clients]
        current: asyncio.Task | None = None
        try:
            while True:
                cmd = await loop.run_in_executor(None, _get, commands)
                kind = cmd[0]
                if kind == "shutdown":
                    return
                if kind in ("stop", "run") and current is not None and not current.done():
                    current.cancel()
                    await asyncio.gather(current, return_exceptions=True)
                if kind == "run":
                    current = asyncio.create_task(self.run(cmd[1]))
                elif kind == "lever":
                    self.set_lever(cmd[1], cmd[2])
                elif kind in ("pause", "resume"):
                    self.emit(
                        LeverRefused(
                            "pause",
                            kind == "pause",
                            "a server's generation cannot be paused by a client; the stream goes on (a turns auto-repeat off, r stops and reruns)",
                        )
                    )
        finally:
            for task in [*metrics, *([current] if current else [])]:
                task.cancel()
            await asyncio.gather(*metrics, *([current] if current else []), return_exceptions=True)
            await self.aclose()


def _get(commands):
    while True:
        try:
            return commands.get(timeout=0.5)
        except queue.Empty:
            continue
        except (EOFError, OSError, ValueError):  # the UI went away
            return ("shutdown",)


def _server_total(s: StreamResult) -> int | None:
    if s.usage and s.usage.get("completion_tokens") is not None:
        return int(s.usage["completion_tokens"])
    if s.timings and s.timings.get("predicted_n") is not None:
        return int(s.timings["predicted_n"])
    return None


class _Batches:
    """Events to the UI a few milliseconds at a time, one queue put per batch: at a fast server's
    thousands of chunks a second, a put and a get per event cost the two processes more than the
    events themselves (measured by benchmarks/chunk_rate.py). Timestamps are taken on arrival, so
    batching moves none of them."""

    EVERY_S = 0.005

    def __init__(self, put):
        self.put = put
        self.pending: list = []

    def __call__(self, event) -> None:
        self.pending.append(event)

    def flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            self.put(batch)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.EVERY_S)
            self.flush()


async def _serve(configs: list[AttachConfig], commands, events) -> None:
    out = _Batches(events.put)
    flusher = asyncio.create_task(out.run())
    try:
        await Servers(configs, out).serve(commands)
    finally:
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        out.flush()


def client_main(configs: list[AttachConfig], commands, events, log_path: str | None) -> None:
    """The client process's entry point (spawned by tui_app.process.EngineProcess)."""
    from tui_app.process import quiet_process

    if quiet_process(log_path, events):
        asyncio.run(_serve(configs, commands, events))
