"""Debian's Chromium, driven headless through Playwright's Python API (the browser is the system's:
Playwright downloads nothing here). Used by the browser tests and by `make screenshots`.

Every request that leaves the page's own origin is blocked and recorded, so a page that needs the
network shows up as such instead of hanging on a machine that has none.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common.deadline import Deadline

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# textual-serve's page forwards the terminal's output over a WebSocket; this keeps its text, so a
# test can wait for what the app drew instead of guessing from pixels.
WS_TAP = """
(() => {
  const Orig = window.WebSocket, dec = new TextDecoder();
  window.__screen = "";
  window.WebSocket = function (...args) {
    const ws = new Orig(...args);
    ws.addEventListener("message", (e) => {
      const text = typeof e.data === "string" ? e.data : dec.decode(e.data);
      window.__screen = (window.__screen + text).slice(-4000000);
    });
    return ws;
  };
  window.WebSocket.prototype = Orig.prototype;
  Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
})();
"""


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def unavailable() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if chromium_path() is None:
        return "Debian's chromium is not installed (`make setup` installs it where apt-get and root are at hand)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing (pip install -e '.[test]')"
    return None


@dataclass
class Visit:
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # requests to anywhere but the page's origin


@contextmanager
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser, url: str, width: int, height: int, tap: bool = False):
    """A page on `url` whose errors and outside requests are recorded in the returned Visit."""
    page = browser.new_page(viewport={"width": width, "height": height})
    visit = Visit()
    origin = url.split("/", 3)[:3] if url.startswith("http") else None

    def route(r):
        target = r.request.url
        own = target.startswith("file://") if origin is None else target.split("/", 3)[:3] == origin
        if own or target.startswith("data:"):
            r.continue_()
        else:
            visit.blocked.append(target)
            r.abort()

    page.route("**/*", route)
    page.on("console", lambda m: visit.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: visit.page_errors.append(str(exc)))
    if tap:
        page.add_init_script(WS_TAP)
    page.goto(url)
    return page, visit


def own_errors(visit: Visit) -> list[str]:
    """Console errors other than the failed loads of requests we blocked ourselves."""
    return [e for e in visit.console_errors if not (visit.blocked and "net::ERR_FAILED" in e)]


def render_file(browser, path: str, png: str, width: int = 1200) -> Visit:
    """A local HTML file, whole page, as a PNG."""
    page, visit = open_page(browser, "file://" + os.path.abspath(path), width, 800)
    page.wait_for_load_state("load")
    page.screenshot(path=png, full_page=True)
    page.close()
    return visit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(log_path: str, *app_args: str, timeout: float = 60.0):
    """`tokentop serve` on a free 127.0.0.1 port; yields its URL once it accepts connections."""
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tui_app", "serve", "--port", str(port), *app_args], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = Deadline(timeout)
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if proc.poll() is not None or deadline.passed():
                        raise RuntimeError(f"tokentop serve did not start: {Path(log_path).read_text()[-500:]}") from None
                    time.sleep(0.2)
            yield f"http://127.0.0.1:{port}/"
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def screen_has(page, text: str, timeout_s: float) -> None:
    """Wait until the app has sent `text` to the browser's terminal."""
    page.wait_for_function("t => window.__screen.includes(t)", arg=text, timeout=timeout_s * 1000, polling=250)


def browse_app(
    browser, url: str, png_first: str | None, png_help: str, width: int = 1400, height: int = 860, timeout_s: float = 180, ready: str = "per-token latency"
) -> Visit:
    """Load the served app, wait for its first frame (or for the text `ready`), press `?` and wait for the help screen."""
    page, visit = open_page(browser, url, width, height, tap=True)
    page.wait_for_function("document.body.classList.contains('-first-byte')", timeout=timeout_s * 1000, polling=250)
    screen_has(page, ready, timeout_s)
    page.wait_for_timeout(1500)  # let the first frames settle before the picture
    if png_first:
        page.screenshot(path=png_first)
    page.locator("#terminal").click()
    page.keyboard.press("?")
    screen_has(page, "KV cache on/off", 30)
    page.wait_for_timeout(800)
    page.screenshot(path=png_help)
    page.close()
    return visit
