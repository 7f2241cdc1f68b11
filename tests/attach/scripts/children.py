"""A user's script, not tokentop's, that generates in processes of its own, never itself.
`one-by-one`: a Python subprocess, then a multiprocessing worker forked after this process imported
transformers (so the worker starts with a copy of tokentop's hook), each printing its text.
`together`: two subprocesses that load the model, wait for each other, then make two calls each at
the same time (as the ranks of a torchrun do)."""

import multiprocessing
import os
import subprocess
import sys
import time


def generate(folder: str, calls: int = 1, meet: str | None = None) -> None:
    from transformers import pipeline

    gen = pipeline("text-generation", model=folder, device="cpu")
    if meet:  # a barrier of two files: both processes loaded before either generates
        open(f"{meet}.{os.getpid()}", "w").close()
        while len([n for n in os.listdir(os.path.dirname(meet)) if n.startswith(os.path.basename(meet) + ".")]) < 2:
            time.sleep(0.01)
    for _ in range(calls):
        out = gen("The capital of France is", max_new_tokens=24, do_sample=False, return_full_text=False)
        print(f"TEXT {out[0]['generated_text']!r}", flush=True)


if __name__ == "__main__":
    folder, how = sys.argv[1], sys.argv[2]
    if how == "child":
        generate(folder, int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
    elif how == "one-by-one":
        subprocess.run([sys.executable, __file__, folder, "child", "1"], check=True)
        import transformers  # noqa: F401

        worker = multiprocessing.get_context("fork").Process(target=generate, args=(folder,))
        worker.start()
        worker.join()
        sys.exit(worker.exitcode)
    else:
        meet = os.path.join(sys.argv[3], "meet")
        ranks = [subprocess.Popen([sys.executable, __file__, folder, "child", "2", meet]) for _ in range(2)]
        sys.exit(max(rank.wait() for rank in ranks))
