"""tokentop's serving bench agrees with `vllm bench serve` (the module, from the vLLM venv that the
vLLM tier uses) on the same real llama.cpp server and the same workload: each figure within 5 %
at concurrency 1 and 8 and at a fixed rate, the two tools taking turns round by round
(benchmarks/peer_agreement.py: how, and where the definitions differ). Few, short requests: the
tier's cost stays about a minute."""

from __future__ import annotations

import pytest

from benchmarks.peer_agreement import FIGURES, Cell, compare
from tests.helpers.vllm import SKIP, VLLM_PYTHON

pytestmark = [pytest.mark.vllm, pytest.mark.agreement]

TOLERANCE = 0.05


def test_tokentop_and_vllm_bench_serve_agree_within_5_percent(llama_server):
    if not VLLM_PYTHON:
        pytest.skip(SKIP)
    from tui_app.engine.models import converted_default

    cells = [Cell("c1", 1, None, 4), Cell("c8", 8, None, 8), Cell("r2/s", None, 2.0, 6)]
    results = compare(llama_server.url, str(converted_default()), cells, 16, 8, 3, VLLM_PYTHON)
    off = []
    for cell, tools in results.items():
        peer, ours = tools["vllm"], tools["tokentop"]
        assert peer["failed"] == 0 and ours["failed"] == 0
        assert peer["requests"] == ours["requests"] == 3 * next(c.requests for c in cells if c.name == cell)
        for title, key, _ in FIGURES:
            ratio = ours[key] / peer[key]
            if abs(ratio - 1) > TOLERANCE:
                off.append(f"{cell} {title}: tokentop {ours[key]:.4g} ÷ vllm {peer[key]:.4g} = {ratio:.3f}")
    assert not off, "; ".join(off)
