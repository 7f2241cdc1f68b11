"""A client of Prometheus' HTTP API (`/api/v1/query`, `query_range`, `targets`, `status/buildinfo`):
the instant and range queries a fleet is read with, and one line for each way it can fail.

Credentials come from environment variables named on the command line (a bearer token, or
`user:password` for basic auth, which Prometheus itself offers through `--web.config.file`); the
values are read here, sent in the request's headers and nowhere else: never printed, logged,
recorded, or part of an error line.
"""

from __future__ import annotations

import base64
import math
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# What each kind of failure is, for callers that act on it (a refresh that failed for a reason
# that can pass, such as a restart, is tried again; the others are said and the session goes on).
UNREACHABLE, NOT_PROMETHEUS, UNAUTHORIZED, QUERY, SERVER = "unreachable", "not_prometheus", "unauthorized", "query", "server"


class PrometheusError(Exception):
    """One line for the user: what failed, where, and what to do. `kind` is one of the five above;
    `query` the PromQL it was about, when a query failed."""

    def __init__(self, kind: str, message: str, query: str = ""):
        super().__init__(message)
        self.kind = kind
        self.query = query


@dataclass(frozen=True)
class Auth:
    """Which environment variables hold the credentials: a bearer token, or `user:password`."""

    token_env: str | None = None
    basic_env: str | None = None

    def missing(self) -> str | None:
        """The variable named but not set, if any."""
        for var in (self.token_env, self.basic_env):
            if var is not None and not os.environ.get(var):
                return var
        return None

    def headers(self) -> dict:
        if self.token_env and os.environ.get(self.token_env):
            return {"Authorization": f"Bearer {os.environ[self.token_env]}"}
        if self.basic_env and os.environ.get(self.basic_env):
            pair = os.environ[self.basic_env].encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return {}

    def named(self) -> str:
        return self.token_env or self.basic_env or ""


def api_root(url: str) -> str:
    """Prometheus' base URL from what a user types: the scheme added, a trailing slash or a
    pasted `/graph` or `/api/v1` path dropped (a path prefix such as `/prometheus` is kept)."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PrometheusError(NOT_PROMETHEUS, f"{url!r} is not an http(s) URL (example: http://127.0.0.1:9090)")
    for tail in ("/api/v1", "/graph", "/targets"):
        if url.endswith(tail):
            url = url[: -len(tail)]
    return url


def _where(url: str) -> str:
    p = urlsplit(url)
    return f"{p.hostname}:{p.port or (443 if p.scheme == 'https' else 80)}"


Vector = list[tuple[dict, float]]  # an instant vector: (labels, value) per series
Matrix = list[tuple[dict, list[tuple[float, float]]]]  # a range: (labels, [(unix seconds, value)])


@dataclass
class Prometheus:
    """One Prometheus server. `requests` counts the HTTP requests made, by path, so a caller (and
    the tests) can see what a refresh costs."""

    url: str
    auth: Auth = field(default_factory=Auth)
    timeout_s: float = 5.0
    insecure: bool = False
    requests: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # httpx here, not at the top: importing it loads rich (its command line's), and monitors
        # loads no UI library (tests/test_contracts.py).
        import httpx

        self.url = api_root(self.url)
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s, connect=3.0), verify=not self.insecure)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _get(self, path: str, params: dict | None = None, query: str = "") -> dict:
        """The `data` of a successful API answer, or PrometheusError saying which way it failed."""
        import httpx

        url = self.url + path
        self.requests[path] = self.requests.get(path, 0) + 1
        where = _where(self.url)
        try:
            # POST for queries, as Prometheus' own UI does: a fleet's PromQL can outgrow a URL.
            if params is not None:
                r = await self.http.post(url, data=params, headers=self.auth.headers())
            else:
                r = await self.http.get(url, headers=self.auth.headers())
        except httpx.TimeoutException:
            raise PrometheusError(UNREACHABLE, f"Prometheus at {where} did not answer within {self.timeout_s:g} s", query) from None
        except httpx.HTTPError as exc:
            text = str(exc)
            if "Name or service not known" in text or "Temporary failure in name resolution" in text:
                raise PrometheusError(UNREACHABLE, f"cannot resolve the host of {self.url}: check --prometheus", query) from None
            if "CERTIFICATE" in text.upper():
                raise PrometheusError(UNREACHABLE, f"{where}: its TLS certificate is not trusted (self-signed?); pass --insecure to accept it", query) from None
            raise PrometheusError(UNREACHABLE, f"cannot reach Prometheus at {where}: connection refused (is it running, on this port?)", query) from None
        if r.status_code in (401, 403):
            if self.auth.named():
                why = f"the credentials in ${self.auth.named()} were refused"
            else:
                why = (
                    "it wants credentials: name the variable that holds them, "
                    "--prometheus-token-env VAR (a bearer token) or --prometheus-basic-env VAR (user:password)"
                )
            raise PrometheusError(UNAUTHORIZED, f"Prometheus at {where} answered {r.status_code}: {why}", query)
        try:
            body = r.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("status") not in ("success", "error"):
            kind = r.headers.get("content-type", "?").split(";")[0]
            raise PrometheusError(
                NOT_PROMETHEUS,
                f"{where} is not a Prometheus HTTP API: GET {path} answered {r.status_code} {kind} (is --prometheus the server's base URL?)",
                query,
            )
        if body["status"] == "error":
            error = str(body.get("error", ""))[:300]
            if body.get("errorType") in ("bad_data", "execution") or r.status_code in (400, 422):
                raise PrometheusError(QUERY, f"Prometheus refused the query: {error}", query)
            raise PrometheusError(SERVER, f"Prometheus at {where} answered {r.status_code}: {error}", query)
        return body.get("data") or {}

    async def version(self) -> str:
        """Its version: the check that the URL is a Prometheus that lets us in."""
        data = await self._get("/api/v1/status/buildinfo")
        return str(data.get("version", "?"))

    async def query(self, expr: str, at: float | None = None) -> Vector:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = await self._get("/api/v1/query", params, expr)
        if data.get("resultType") == "scalar":
            return [({}, _number(data["result"][1]))]
        return [(s.get("metric", {}), _number(s["value"][1])) for s in data.get("result", ())]

    async def query_range(self, expr: str, start: float, end: float, step: float) -> Matrix:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        data = await self._get("/api/v1/query_range", params, expr)
        return [(s.get("metric", {}), [(float(t), _number(v)) for t, v in s.get("values", ())]) for s in data.get("result", ())]

    async def targets(self) -> list[dict]:
        """The active scrape targets: labels, health, lastError, scrapeUrl."""
        data = await self._get("/api/v1/targets?state=active")
        return list(data.get("activeTargets", ()))


def _number(text) -> float:
    """A sample value as Prometheus writes it ("NaN", "+Inf" included)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan
