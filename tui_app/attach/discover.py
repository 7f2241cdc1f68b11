"""Servers on this host: the process behind a URL's port, and what answers /v1/models where the
serving engines usually listen."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import psutil

# vLLM 8000, llama.cpp 8080 (newer builds 9931), SGLang 30000, Ollama 11434, TGI 3000 / 8080, lmdeploy 23333.
USUAL_PORTS = (8000, 8080, 9931, 30000, 11434, 3000, 23333)


def _is_local(host: str) -> bool:
    try:
        addrs = {ai[4][0] for ai in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    own = {a.address for nics in psutil.net_if_addrs().values() for a in nics}
    return any(ipaddress.ip_address(a.split("%")[0]).is_loopback or a in own for a in addrs)


def _listeners() -> list:
    try:
        return [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    except (psutil.Error, OSError):  # not permitted on some systems: no local pids, no scan
        return []


def local_pid(url: str) -> int | None:
    """The pid of the process listening on the URL's port when its host is this machine; None
    for a remote server, or when the system does not tell (another user's process, a container)."""
    p = urlsplit(url)
    port = p.port or (443 if p.scheme == "https" else 80)
    if not p.hostname or not _is_local(p.hostname):
        return None
    return next((c.pid for c in _listeners() if c.laddr.port == port and c.pid), None)


def process_rss(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return None


def candidate_urls() -> list[str]:
    """Local ports worth asking: the engines' usual ones, then every other listener of this host."""
    ports = list(USUAL_PORTS)
    for c in _listeners():
        if c.laddr.port not in ports:
            ports.append(c.laddr.port)
    return [f"http://127.0.0.1:{port}" for port in ports]


def find_servers(timeout: float = 0.5) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """([(url, model ids)] of local OpenAI-compatible servers, [urls tried])."""
    import httpx

    found = []
    tried = candidate_urls()
    with httpx.Client(timeout=timeout) as client:
        for url in tried:
            try:
                r = client.get(url + "/v1/models")
                ids = [m["id"] for m in r.json()["data"]] if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                ids = None
            if ids is not None:
                found.append((url, ids))
    return found, tried
