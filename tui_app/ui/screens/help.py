"""`?`: what each key does and what each pane shows."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# tokentop keys

| key | what it does |
|---|---|
| `k` | KV cache on/off (off: every step recomputes the whole context) |
| `c` | compile: static KV cache + `torch.compile` of the decode step (CUDA graphs on GPU) |
| `w` | weight quantization: off → int8 → int4 |
| `s` | speculative decoding: off → prompt lookup → draft model |
| `b` | batch size 1 → 2 → 4 → 8: yours and distinct prompts arriving, joining and leaving (`--batch-prompts replicated`: copies of yours) |
| `T` | a reasoning model's thinking budget: off → 64 → 256 → 1024 tokens → none, the think span closed at it (shown where the model has one) |
| `l` | prompt length preset: short → long (→ file); a run in flight starts again on it |
| `n` | new prompt |
| `r` | rerun the prompt |
| `t` | attached to several servers: the next run goes to the next one |
| `space` | pause / resume generation |
| `a` | auto-repeat: run in a loop (demos, leak watching) |
| `o` | colour the tokens: plain → by origin (drafts kept underlined, rejected ghosted) → by latency → by the model's confidence → by phase |
| `f` | fold a reasoning model's thinking to a line a span (it counts on while the model thinks), or show it whole |
| `p` | the anatomy of the next 8 decode steps: where a step's time goes, by part |
| `g` | the lever ledger: each mix run so far against plain on the same prompt and length, and whether it paid |
| `E` | an MoE's routing: layers × experts heatmap, each layer's imbalance, the hottest experts, what the last step read (`w`: run / last steps) |
| `P` | the presenter's screen: tok/s, TTFT and ITL p50 in big figures over the text and one thick chart (`v` cycles) |
| `m` | measure the memory read rate again (the `mem bw` figure's reference) |
| `L` | the leak view: the baselines on their own axis, their fit and its interval |
| `H` | on CUDA, the allocator's history of the next 3 runs, for PyTorch's memory viewer |
| `v` | next chart, when the terminal is too small for all of them (under 120×34) |
| `x` | X-ray of an attached server's run: a bar per stream, the server's phases from the send, the client's chunks over them |
| `e` | export the session as JSON |
| `ctrl+s` | screenshot (SVG) |
| `R` | restart the engine (asks first while it works); run numbers continue, finished runs are kept |
| `?` | this help |
| `q`, `ctrl+q`, `ctrl+c` | quit |

Levers switch at the next token boundary and continue the same text; pressed between runs,
a lever (or `l`) applies to the next run, which `r` starts; a change that needs the
cache rebuilt re-prefills the whole text, shown as a labelled spike. A lever the device or the
current setting cannot do is refused with the reason.

**Panes.** *tokens*: the prompt dimmed, lever switches inline, coloured as `o` says (its legend under the pane). *per-token latency*: inter-token
latency of each token, TTFT marked, lever switches as vertical marks, mean and p95 lines.
*KV cache*: bytes measured from the cache object over the formula
2 × bytes/elem × batch × seq_len × layers × kv_heads × head_dim. *utilization*: CPU %, GPU busy %
(NVML's share of time a kernel ran) and memory busy % of the engine's GPU, every GPU's busy %, clock and power, and `mem bw`: the bytes
a decode step reads (the weights once, the KV cache at its length) × steps per second, as a fraction
of a read of the same weights in place, measured when the weights change and on `m`.
*memory*: engine and UI RSS, each GPU's memory,
GPU and torch allocator memory, run ends marked, and the leak verdicts (trend of the memory left
after each run; on a GPU also of torch's and NVML's device memory). Under it, where the memory is:
the engine's RSS as the weights in use (their bytes), the KV cache (measured, while a run is in
flight) and the rest; on a GPU, NVML's count of the process as weights, KV, activations (torch
allocated − both), the allocator's cache (reserved − allocated) and outside torch (NVML − reserved).
*runs*: one row per run and lever segment; *output* says whether the text equals
plain greedy decoding, and *ppl* is the perplexity of a fixed reference text under the current
weights: a speedup that breaks the model shows there.
*fleet* (`attach --prometheus`): a row per replica from the Prometheus that scrapes them — up or
down and since when, KV usage, running, waiting, tok/s, TTFT and ITL p50/p99 over the window,
preemptions, prefix hits — and the fleet's row, its quantiles from every replica's summed
histogram buckets; a replica down, KV ≥ 95 %, waiting while others idle or a p99 far from the
fleet's is coloured and listed first. `utilization` adds J/token from the energy counter of a local GPU
(NVML's; hwmon's on AMD and Intel; macmon's on a Mac); the fleet pane from a DCGM exporter, where Prometheus scrapes one. With `--watch`
tokentop sends no request of its own; without it, its runs are load on the server.

**Files.** The session is recorded to the recordings folder (`$TOKENTOP_DATA/recordings`); exports
(`e`) and screenshots (`ctrl+s`) go there too unless `--out-dir` names another folder, and the app
says each full path. The engine's log is `engine.log` in the cache folder (`$TOKENTOP_CACHE`).

Press `escape` or `?` to close.
"""


class HelpScreen(ModalScreen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "dismiss", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; height: 90%; border: thick $primary; background: $surface; padding: 0 1; }
    /* Textual draws these in $primary: 3.7:1 on the dark surface, under WCAG AA (tests/ui/test_look.py). */
    HelpScreen MarkdownH1, HelpScreen MarkdownTableContent > .header { color: $text; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP)
