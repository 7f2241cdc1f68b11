"""The client of an attached server: streams requests through its OpenAI-compatible API and scrapes
its Prometheus /metrics, and turns both into the events the in-process engine emits.

Timing rule (the same in the app, the README and the tests): TTFT runs from sending the request
to the first chunk that carries text; each later chunk that brings tokens is one step, its latency
the gap since the stream's previous such chunk. Tokens are the server's own running count where
the stream carries one (llama.cpp `timings.predicted_n`, vLLM and SGLang `continuous_usage_stats`),
so a chunk holding k tokens (speculative decoding, a stream interval) is one step of k tokens whose
gap is spread over them, as the engine spreads a speculative verify step; elsewhere each chunk with
text counts as one token, the run says so, and the server's final count is shown beside it.

The chunks are read by sse.py; what goes wrong is said by errors.py; loop.py runs the clients in a
process of their own beside the UI (like the engine), so a redraw never delays a chunk's timestamp
and a stalled server never stalls a frame.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

import aiohttp
import httpx

from monitors.events import (
    NO_THINKING,
    THINK_BUDGETS,
    EngineError,
    EngineReady,
    LeverChanged,
    LeverRefused,
    Levers,
    RunFinished,
    RunStarted,
    ServerSample,
    Step,
    now_ns,
)
from monitors.redact import redact
from monitors.servers import OPENAI, EngineTable, MetricsWindow, json_safe
from tui_app.attach.errors import AttachError, api_base, describe_failure, describe_status, host_port, server_root
from tui_app.attach.experts import RECORDERS, ServerExperts
from tui_app.attach.metrics import detect, scrape
from tui_app.attach.pooled import NotAStream, env_proxy, sse_post, token_chunks
from tui_app.attach.sse import Answers, StreamResult, run_end
from tui_app.attach.tracing import Tracing

CONCURRENCY = (1, 2, 4, 8, 16, 32)
# The levers a server sets when it starts; a client cannot switch them.
SERVER_OWNED = {
    "cache": "the KV cache",
    "compile": "compilation / CUDA graphs",
    "quant": "the weights' format",
    "spec": "speculative decoding",
}


def server_ready(
    model: str, source: str, device: str, dtype: str, server: dict, *, n_params: int = 0, weight_bytes: int = 0, context_len: int = 0, load_s: float = 0.0
) -> EngineReady:
    """A source that is not an engine (a server, a fleet): the engine's own fields (layers, heads,
    threads) zero, and the server's description with what every such source offers (the
    concurrency steps, the levers the server owns)."""
    described = {**server, "concurrency": list(CONCURRENCY), "server_owned": SERVER_OWNED}
    return EngineReady(
        model=model,
        source=source,
        device=device,
        dtype=dtype,
        n_params=n_params,
        weight_bytes=weight_bytes,
        n_layers=0,
        kv_heads=0,
        head_dim=0,
        kv_bytes_per_elem=0,
        context_len=context_len,
        load_s=load_s,
        threads=0,
        server=described,
    )


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
    watch: bool = False  # the operator's mode: /metrics only, no request of tokentop's own
    otlp: str | None = None  # HOST:PORT of the OTLP receiver for the servers' spans (tui_app/attach/otlp.py), None: off
    expert_dir: str | None = None  # where an SGLang or lmdeploy server writes its expert load (attach/experts.py), None: off
    otlp_grace_s: float = 15.0  # how long a span may come after its stream's end before "no server span" is said
    max_connections: int | None = max(CONCURRENCY) + 4  # None: as many as are in flight (a bench's open loop must never queue here)


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
        self._answers = Answers(cfg.temperature)
        self._inflight: list[StreamResult] = []  # every stream now open, of every run (a bench runs several)
        self._metrics_error = ""
        self.tracing = Tracing(emit)
        self.experts: ServerExperts | None = None
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(cfg.timeout_s, connect=5.0),
            verify=not cfg.insecure,
            limits=httpx.Limits(max_connections=cfg.max_connections),
        )
        self._streams: aiohttp.ClientSession | None = None  # made in the loop that uses it
        self._proxy = env_proxy(self.base)

    def streams(self) -> aiohttp.ClientSession:
        if self._streams is None:
            self._streams = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.cfg.max_connections or 0, ssl=not self.cfg.insecure),
                # sock_read as httpx's read timeout: a stream silent this long is stalled
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=self.cfg.timeout_s),
            )
        return self._streams

    async def aclose(self) -> None:
        await self.http.aclose()
        if self._streams is not None:
            await self._streams.close()

    # ------------------------------------------------------------ connecting
    async def _get(self, url: str, what: str, timeout: float | None = None) -> httpx.Response:
        try:
            return await self.http.get(url, headers=self._headers, timeout=timeout or self.cfg.timeout_s)
        except httpx.HTTPError as exc:
            raise AttachError(describe_failure(exc, url, self.cfg.timeout_s)) from None

    async def _models(self) -> list[dict]:
        """GET /v1/models: what it serves, the model runs ask for chosen."""
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
        return models

    async def _watched(self) -> list:
        """--watch: the server's /metrics only, not even /v1/models; the model from its labels."""
        samples, error = await self._scrape()
        if samples is None:
            raise AttachError(f"--watch reads the server's /metrics, and {error}")
        if self.model is None:
            names = {labels.get("model_name") or labels.get("model") for series in samples.values() for labels, _ in series}
            self.model = next((n for n in sorted(names - {None, ""})), "(not asked: --watch)")
        return []

    async def connect(self) -> EngineReady:
        """Ask the server what it serves and what it is; AttachError says why it cannot be used."""
        t0 = time.perf_counter()
        models = await self._watched() if self.cfg.watch else await self._models()
        meta = next((m.get("meta") or {} for m in models if m["id"] == self.model), {})
        self.engine = await detect(self.http, self.root, self._headers, (await self._scrape())[0])
        self.window = MetricsWindow(self.engine)
        if self.cfg.expert_dir and self.engine.name in RECORDERS:
            self.experts = ServerExperts(self.http, self.root, self._headers, self.engine.name, self.cfg.expert_dir, self.emit)
        elif self.cfg.expert_dir:
            self.emit(EngineError(message=f"--expert-dir: {self.engine.name} has no expert load tokentop reads (SGLang's or lmdeploy's recorder); left out"))
        self.n_ctx = meta.get("n_ctx") or next((m.get("max_model_len") for m in models if m["id"] == self.model), None)
        from tui_app.attach.discover import local_pid

        self.pid = local_pid(self.root)
        if not self.cfg.label:
            self.levers = Levers(batch=self.cfg.concurrency, server=f"{host_port(self.base)}")
        ready = server_ready(
            self.model,
            self.shown_root,
            self.engine.name,
            "server",
            {
                "engine": self.engine.name,
                "url": self.shown_root,
                "metrics_url": self.shown_metrics,
                "label": self.levers.server,
                "pid": self.pid,
                "kv_note": self.engine.kv_note,
                "chat": self.cfg.chat,
                "watch": self.cfg.watch,
                "expert_dir": self.cfg.expert_dir if self.experts else None,
            },
            n_params=int(meta.get("n_params") or 0),
            weight_bytes=int(meta.get("size") or 0),
            context_len=int(self.n_ctx or 0),
            load_s=time.perf_counter() - t0,
        )
        self.streams()  # made now, not in the first request's time
        self.emit(ready)
        return ready

    async def _scrape(self) -> tuple[dict | None, str]:
        return await scrape(self.http, self.metrics_url, self._headers, self.cfg.timeout_s, self.engine)

    async def sample(self) -> ServerSample | None:
        """A scrape as figures, emitted; why there is none is said once, and its return too."""
        samples, error = await self._scrape()
        if error != self._metrics_error:
            if error or self._metrics_error:
                self.emit(ServerSample(t_ns=now_ns(), values={}, sources={}, error=error or f"{self.shown_metrics} answers again", server=self.levers.server))
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
        ev = ServerSample(t_ns=now_ns(), values=json_safe(values), sources=sources, server=self.levers.server)
        self.emit(ev)
        return ev

    async def metrics_loop(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(1.0 / max(self.cfg.metrics_hz, 0.1))

    # ------------------------------------------------------------ levers
    def set_lever(self, name: str, value) -> None:
        answer = lever_answer(name, value, self.levers, self.engine)
        if isinstance(answer, LeverChanged):
            self.levers = answer.levers  # streams in flight keep going; the next run opens this many
        self.emit(answer)

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
        if self.levers.think > 0 and self.engine.think_budget:
            body[self.engine.think_budget] = self.levers.think
        elif self.levers.think == NO_THINKING and self.engine.think_switch:
            body[self.engine.think_switch] = {"enable_thinking": False}
        body.update(json.loads(json.dumps(self.engine.stream_extras)))
        return body

    async def run(self, req) -> RunFinished | None:
        from tui_app.prompts import preset_prompt

        try:
            text = req.prompt if req.prompt is not None else preset_prompt(req.preset, req.prompt_file)
        except ValueError as exc:
            self.emit(EngineError(message=str(exc)))
            return None
        if not text.strip():
            self.emit(EngineError(message="the prompt is empty; type some text or choose a preset"))
            return None
        self.run_id += 1
        run_id = self.run_id
        levers = self.levers
        body = self._body(text, req)
        url = self.base + ("/chat/completions" if self.cfg.chat else "/completions")
        started = RunStarted(
            run_id=run_id,
            levers=levers,
            prompt_tokens=0,
            max_new_tokens=req.max_new_tokens,
            prompt_text=text,
            preset=req.preset if req.prompt is None else "custom",
        )
        streams = [StreamResult() for _ in range(levers.batch)]
        self._inflight.extend(streams)
        self.emit(started)
        if self.experts:
            await self.experts.begin()
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
        counts = await self.experts.end(run_id) if self.experts else None
        return self._finish(run_id, req, body, streams, stopped, counts)

    async def _stream(self, k: int, url: str, body: dict, t0: int, run_id: int, out: StreamResult) -> None:
        trace_id, trace = self.tracing.start(run_id, k, t0)
        try:
            for attempt in (trace, {}):
                async with sse_post(self.streams(), url, body, {**self._headers, **attempt}, self._proxy) as r:
                    if r.status != 200:
                        text = await r.text(errors="replace")
                        if attempt and r.status in (400, 431) and await self.tracing.rejected(self.http, url, body, self._headers):
                            continue
                        out.error = describe_status(r.status, text, url, f"POST {urlsplit(url).path}")
                        return
                    await self._read(r, k, t0, run_id, out)
                    break
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            out.error = describe_failure(exc, url, self.cfg.timeout_s)
        except NotAStream:
            out.error = f"{host_port(url)} did not answer with a stream (Content-Type is not text/event-stream)"
        finally:
            self.tracing.account(run_id, k, trace_id, out)

    async def _read(self, r: aiohttp.ClientResponse, k: int, t0: int, run_id: int, out: StreamResult) -> None:
        """Each chunk that brings tokens as a Step of stream `k`: its latency the gap since the stream's previous one."""
        t_prev, step = t0, 0
        async for piece in token_chunks(r, out):
            step += 1
            t = piece.payload
            self.emit(
                Step(
                    run_id=run_id,
                    step=step,
                    kind="prefill" if step == 1 else "decode",
                    token_ids=[],
                    text=piece.text,
                    n_tokens=piece.n,
                    phase=piece.phase,
                    t_ns=t,
                    dt_ns=t - t_prev,
                    forward_ns=0,
                    kv_bytes=0,
                    kv_alloc_bytes=0,
                    seq_len=out.context,
                    segment=k,
                )
            )
            t_prev = t

    def _finish(self, run_id: int, req, body: dict, streams: list[StreamResult], stopped: bool, counts: list | None) -> RunFinished:
        lead = streams[0]
        errors = [s.error for s in streams if s.error]
        for e in dict.fromkeys(errors):
            self.emit(EngineError(message=e))
        malformed = sum(s.malformed for s in streams)
        if malformed:
            self.emit(EngineError(message=f"{malformed} stream line(s) were not JSON and were skipped"))
        reason, n_tokens, prompt_tokens, details = run_end(streams, stopped)
        key = (self.levers.server, json.dumps(body.get("messages") or body.get("prompt")), req.max_new_tokens, req.ignore_eos)
        note = self._answers.note(key, lead.text, reason)
        if not lead.from_server and details["server_tokens"] is not None and details["server_tokens"] != lead.counted:
            note += f"; {lead.counted} chunks, {details['server_tokens']} tokens (server)"
        from tui_app.attach.discover import process_rss

        rss = process_rss(self.pid)
        if rss is None and self.window.scrapes:  # a remote server that exports its own
            exported = self.window.figures()[0].get("rss")
            rss = int(exported) if exported is not None else None
        ev = RunFinished(
            run_id=run_id,
            n_tokens=n_tokens,
            stop_reason=reason,
            text=lead.text,
            peak_rss=rss,
            baseline_rss=rss,
            torch_peak=None,
            gpu_baseline=None,
            perplexity=None,
            first_diff=None,
            diff_note=note,
            prompt_tokens=prompt_tokens,
            server=details,
            expert_counts=counts,
        )
        self.emit(ev)
        return ev


def lever_answer(name: str, value, levers: Levers, engine: EngineTable) -> LeverChanged | LeverRefused:
    """What a server's client says to a lever: the number of streams it opens changes, and the
    thinking budget where the engine takes one on a request; the levers the server set when it
    started (SERVER_OWNED) and any other are refused, with what to do."""
    if name in SERVER_OWNED:
        owned = f"{SERVER_OWNED[name]} is set when the {engine.name} server starts"
        return LeverRefused(lever=name, value=value, reason=f"{owned}: restart it with the option, or attach to a second server started with it and compare")
    if name == "think" and ((value == NO_THINKING and not engine.think_switch) or (value > 0 and not engine.think_budget)):
        what = "no switch (chat_template_kwargs)" if value == NO_THINKING else "no budget"
        reason = f"the {engine.name} server's thinking is its own: it takes {what} on a request, and tokentop shows the thinking it streams"
        return LeverRefused(lever=name, value=value, reason=reason)
    allowed = {"batch": CONCURRENCY, "think": THINK_BUDGETS}.get(name)
    if allowed is None:
        return LeverRefused(lever=name, value=value, reason=f"{name} is not a lever of an attached server")
    if value not in allowed:
        what = "concurrency" if name == "batch" else "the thinking budget (0: off, -1: no thinking)"
        return LeverRefused(lever=name, value=value, reason=f"{what} must be one of {', '.join(map(str, allowed))}")
    return LeverChanged(run_id=None, lever=name, value=value, levers=replace(levers, **{name: value}))
