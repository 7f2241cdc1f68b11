"""A real Prometheus (Debian's `prometheus` package, which `make test` installs where it can) run as
a plain process on 127.0.0.1 for the fleet tests and benchmarks, and a small HTTP server for the
metric texts of what cannot run here (a DCGM exporter without a GPU, a production-stack router,
a hundred replicas), which that Prometheus scrapes like any target.

Targets are file-based service discovery (`file_sd_configs`): a test sets a group of targets by
writing its file, and Prometheus picks it up at once (it watches the folder). Each group sets
its own `job`, `instance` and `__metrics_path__`, so one stand-in server can be many targets.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from benchmarks.common.deadline import Deadline
from tests.helpers.vllm import free_port

PROMETHEUS = shutil.which("prometheus")


def unavailable() -> str | None:
    """Why the real Prometheus cannot run here, or None."""
    if PROMETHEUS is None:
        return "Prometheus is not installed (make test installs Debian's prometheus where apt-get and root are at hand)"
    return None


class PrometheusServer:
    """`prometheus --config.file F --storage.tsdb.path D --web.listen-address 127.0.0.1:PORT`,
    scraping every target each `interval`. `web_config`: the text of a --web.config.file (basic
    auth); `args`: more flags (e.g. --query.max-samples)."""

    def __init__(self, folder: str, interval: str = "1s", web_config: str | None = None, args: tuple[str, ...] = (), port: int | None = None):
        self.folder = folder
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.targets_dir = os.path.join(folder, "targets")
        os.makedirs(self.targets_dir, exist_ok=True)
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": [{"job_name": "file", "file_sd_configs": [{"files": [os.path.join(self.targets_dir, "*.json")], "refresh_interval": "1s"}]}],
        }
        self.config = os.path.join(folder, "prometheus.yml")
        with open(self.config, "w") as f:
            json.dump(config, f)  # JSON is YAML
        self.cmd = [
            PROMETHEUS or "prometheus",
            f"--config.file={self.config}",
            f"--storage.tsdb.path={os.path.join(folder, 'data')}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            *args,
        ]
        self.auth = None
        if web_config is not None:
            path = os.path.join(folder, "web.yml")
            with open(path, "w") as f:
                f.write(web_config)
            self.cmd.append(f"--web.config.file={path}")
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self, wait: bool = True) -> None:
        self.log = open(os.path.join(self.folder, "prometheus.log"), "a")  # noqa: SIM115 - open while it runs
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = Deadline(timeout)
        while not deadline.passed():
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: see {self.log.name}")
            try:
                # /-/ready answers 401 under basic auth: it listens, which is all this waits for.
                if httpx.get(self.url + "/-/ready", timeout=1.0).status_code in (200, 401):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus did not get ready in {deadline}: see {self.log.name}")

    def set_targets(self, name: str, groups: list[dict], wait: bool = True) -> None:
        """Write one file of target groups ([{"targets": [...], "labels": {...}}]); an empty list
        removes it, and returns once Prometheus has dropped those targets' series (its discovery
        passes changes on every 5 s), so that what a test added is gone for the next; wait=False
        returns at once (another removal that waits, right after, waits for both)."""
        path = os.path.join(self.targets_dir, name + ".json")
        if not groups:
            if os.path.exists(path):
                with open(path) as f:
                    jobs = {g["labels"]["job"] for g in json.load(f)}
                os.remove(path)
                deadline = Deadline(30)
                while wait and any(self.up(job) for job in jobs) and not deadline.passed():
                    time.sleep(0.2)
            return
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(groups, f)
        os.replace(tmp, path)  # whole, so Prometheus never reads half a file

    def up(self, job: str, headers: dict | None = None) -> dict:
        """instance → value of `up` for a job, as Prometheus says now."""
        r = httpx.get(self.url + "/api/v1/query", params={"query": f'up{{job="{job}"}}'}, headers=headers or {}, timeout=5)
        return {s["metric"]["instance"]: float(s["value"][1]) for s in r.json()["data"]["result"]}

    def wait_up(self, job: str, n: int, timeout: float = 30.0, headers: dict | None = None) -> None:
        """Until n targets of `job` are up and each has been scraped twice (a rate needs two samples)."""
        deadline = Deadline(timeout)
        while not deadline.passed():
            try:
                if sum(v == 1.0 for v in self.up(job, headers).values()) >= n:
                    time.sleep(2.5)
                    return
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            time.sleep(0.2)
        up = self.up(job, headers)
        raise RuntimeError(f"{n} targets of job {job} were not up within {deadline}: {sum(v == 1.0 for v in up.values())} of {len(up)} are")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def restart(self) -> None:
        self.stop()
        self.start()

    close = stop


def group(job: str, address: str, instance: str | None = None, path: str = "/metrics", **more: str) -> dict:
    """A static target group; `more`: target labels, as a discovery's relabelling sets them (a `pod`)."""
    labels = {"job": job, "__metrics_path__": path, **more}
    if instance:
        labels["instance"] = instance
    return {"targets": [address], "labels": labels}


class StandIns:
    """An HTTP server on 127.0.0.1 answering GET PATH with a metric text: a string, or a function
    called at each scrape (for counters that grow with time)."""

    def __init__(self):
        self.texts: dict = {}
        texts = self.texts

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = texts.get(self.path)
                if body is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = (body() if callable(body) else body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
