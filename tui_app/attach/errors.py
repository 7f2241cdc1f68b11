"""What goes wrong with a server, in one line each: a URL that is not one, a request that failed,
an answer that is not the API's. The line names the server (host:port) and what to do; never a
request's headers (the API key is one)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import aiohttp
import httpx

from monitors.redact import redact


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


NAME_NOT_RESOLVED = ("Name or service not known", "nodename nor servname", "Temporary failure in name resolution")


def _failure_kind(exc: Exception, text: str) -> str | None:
    """What went wrong, the same for the streams' client (aiohttp) and the GETs' (httpx)."""
    connect_error = isinstance(exc, httpx.ConnectError)
    if isinstance(exc, (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout)):
        return "connect timeout"
    if isinstance(exc, aiohttp.ClientSSLError) or (connect_error and ("CERTIFICATE" in text.upper() or "SSL" in text.upper())):
        return "tls"
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or (connect_error and any(s in text for s in NAME_NOT_RESOLVED)):
        return "name"
    if isinstance(exc, aiohttp.ClientConnectorError) or connect_error:
        return "refused"
    if isinstance(exc, (aiohttp.SocketTimeoutError, httpx.ReadTimeout)):
        return "stalled"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError, httpx.RemoteProtocolError, httpx.ReadError)):
        return "closed"
    return None


def describe_failure(exc: Exception, url: str, timeout_s: float) -> str:
    """One line for a failed request, naming the URL and what to do; never the request's headers,
    nor a password or token in the URL."""
    where = host_port(url)
    url, text = redact(url), redact(str(exc))
    match _failure_kind(exc, text):
        case "connect timeout":
            return f"no answer from {where} within the connect timeout: is the host right and reachable?"
        case "tls":
            return f"{where}: its TLS certificate is not trusted (self-signed?); pass --insecure to accept it"
        case "name":
            return f"cannot resolve the host of {url}: check the URL"
        case "refused":
            return f"cannot reach {where}: connection refused (is the server running, on this port?)"
        case "stalled":
            return f"{where} sent nothing for {timeout_s:g} s: the stream stalled (--timeout sets the limit)"
        case "closed":
            return f"{where} closed the connection mid-stream (the server stopped, or the network dropped it)"
    return f"{where}: {type(exc).__name__}: {text[:200]}"


def describe_status(code: int, body: str, url: str, what: str) -> str:
    where = host_port(url)
    url = redact(url)
    if code in (401, 403):
        return f"{where} answered {code} to {what}: the API key is missing or wrong (set it in OPENAI_API_KEY, or name the variable with --api-key-env)"
    if code == 404:
        return f"{where} answered 404 to {what}: not an OpenAI-compatible API at {url} (is the URL the server's base?)"
    detail = redact(error_text(body))
    return f"{where} answered {code} to {what}" + (f": {detail}" if detail else "")


def error_text(body: str) -> str:
    """The message of an OpenAI-style error body, or its start."""
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, TypeError):
        return body.strip().splitlines()[0][:200] if body.strip() else ""
    err = obj.get("error", obj) if isinstance(obj, dict) else obj
    if isinstance(err, dict):
        return str(err.get("message") or err.get("detail") or err)[:200]
    return str(err)[:200]
