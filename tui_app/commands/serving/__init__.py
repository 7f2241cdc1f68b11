"""`tokentop bench --endpoint URL [--endpoint URL2]`: a serving benchmark of running servers.

Cells: prompt length × output length × load, where load is a number of concurrent clients (closed
loop: each sends its next request when the last one ends) or, with --rate, Poisson arrivals at R
requests/s (open loop: requests start on schedule whatever the server's state, as real traffic
does); or a dataset's or a trace's requests (workloads.py). Each cell runs --repeats rounds, the
servers taking turns round by round (round k of each back to back, so that a ratio's pair shares
the machine's moment), and each figure has its interval over the rounds (cell_stats.py). Every
request goes through the attach client, so TTFT and ITL have the attach definitions (ITL per token,
a multi-token chunk spread over its tokens); TPOT is (e2e − TTFT) ÷ (tokens − 1) per request, as
`vllm bench serve` computes it. The server's own figures come from its /metrics over the cell's
window. Goodput: requests per second that met every SLO given with --slo. With --sweep, the rate is
raised step by step until the SLO breaks (sweep.py, sweep_run.py); with --live, the attach TUI
watches the load (live.py).

Its modules: command.py the options, their checks and the run; workloads.py what a round sends and
when; loadgen.py the load generator; cells.py a round measured on one server and the report at the
end; tables.py the requests, cells, tables and files; cell_stats.py the intervals and ratios;
sweep.py and sweep_run.py --sweep; live.py --live. This module is the package's face: what the rest
of tokentop uses of it, and only that.
"""

from __future__ import annotations

# The command as the CLI runs it (tui_app/cli.py), and a sweep's SLO read back from its JSON (the report's headroom figure).
from tui_app.commands.serving.command import PARSER, Options, add_args, bench_process, main, parse_slo

# --live's bench process and the TUI's source of it (tests/ui/test_bench_live.py).
from tui_app.commands.serving.live import BenchSource, Job

# One round of a workload on one server (tests/benchmarks/test_generator_capacity.py).
from tui_app.commands.serving.loadgen import run_round
from tui_app.commands.serving.workloads import Item

__all__ = ["PARSER", "BenchSource", "Item", "Job", "Options", "add_args", "bench_process", "main", "parse_slo", "run_round"]
