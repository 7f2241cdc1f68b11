"""The live metrics window keeps only the scrapes its figures read: the newest and the last one a
window older. Minutes of scrapes at 1 Hz hold a dozen, and the figures are those of all of them."""

from __future__ import annotations

from prometheus_client import generate_latest

from monitors.servers import VLLM, MetricsWindow, parse_metrics
from tests.monitors.test_servers import vllm_registry


def test_the_window_holds_what_its_figures_read_and_no_more():
    reg, m = vllm_registry()
    window = MetricsWindow(VLLM, window_s=10.0)
    every: list = []  # each scrape, as it came
    for t in range(300):  # five minutes at 1 Hz, the generation counter rising faster as it goes
        m["gen"].labels("llama", "0").inc(t)
        m["ttft"].labels("llama", "0").observe(0.05 * (t % 9))
        window.add(parse_metrics(generate_latest(reg).decode()), t=float(t))
        every.append(window.scrapes[-1])
        assert len(window.scrapes) <= 12
        whole = MetricsWindow(VLLM, window_s=10.0, keep=len(every))
        whole.scrapes.extend(every)  # given every scrape, dropping none
        assert window.figures() == whole.figures()
