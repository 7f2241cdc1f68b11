"""A run's state between two of its steps, and the Step event each step makes of it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from monitors.events import Step, now_ns
from monitors.kvcache import measure_cache
from monitors.phases import ANSWER, StepPhases
from monitors.text import IncrementalDecoder, step_text
from tui_app.engine.batching import ContinuousBatch
from tui_app.engine.memory import MemoryWatch
from tui_app.requests import Command, RunRequest


@dataclass
class RunState:
    """One run's state between two of its steps."""

    run_id: int
    req: RunRequest
    prompt_ids: list[int]
    tokens: list[list[int]]  # every sequence of a replicated batch, its prompt included (else the run's own alone)
    poll: Callable[[], Iterable[Command]]  # the commands sent since the last step
    memory: MemoryWatch
    text: IncrementalDecoder
    last_emit: int  # when the last event of the run was emitted (its RunStarted, then each Step)
    phases_at: int  # Phases.ns then: the phases between two emissions are not a step's time
    out_ids: list[int] = field(default_factory=list)
    finished_rows: list[bool] = field(default_factory=list)
    batch: ContinuousBatch | None = None  # distinct prompts batched with the run's own (--batch-prompts distinct)
    segment: int = 0  # lever switches so far
    reprefill: bool = False  # a switch changed the weights, cache layout or batch: rebuild the cache
    need_prefill: bool = True
    first: bool = True
    cache: object = None
    steps: int = 0
    paused_at: float | None = None
    stop_reason: str = "max tokens"
    phases: StepPhases | None = None  # a reasoning model's: each step's phase

    @property
    def remaining(self) -> int:
        return self.req.max_new_tokens - len(self.out_ids)

    def step_event(self, kind: str, new: list[int], forward_ns: int, spec: tuple[int, int, list[int]], compute_ns: int, phases_ns: int, p: list[float]) -> Step:
        """The Step event of the step that just made `new` (row 0's tokens, `p` their probabilities
        if measured; spec: proposed, accepted, the rejected proposals), its interval since the last emission."""
        proposed, accepted, rejected = spec
        batch = self.batch
        if batch is None:  # every token but the newest is in the cache (verify steps crop the rejected ones)
            kv = measure_cache(self.cache, len(self.tokens[0]) - 1)
            kv_used, rows, waiting, batch_tokens = kv.used_bytes, [], 0, 0
        else:  # the padded rectangle measured; the rows' own tokens are its share that is not padding
            kv = measure_cache(self.cache, batch.cache_len(self.cache))
            kv_used = kv.alloc_bytes * batch.cached_tokens() // max(1, len(batch.rows) * kv.seq_len) if kv.seq_len else 0
            rows, waiting, batch_tokens = batch.view(), len(batch.waiting), batch.step_tokens
        # The accepted drafts' text apart from the target's own (the token pane's colourings); a token's own with its probability.
        p = p[: len(new)]
        delta, drafted_chars, rejected_text, chars = step_text(self.text, new, accepted, rejected, each=bool(p))
        self.steps += 1
        t1 = now_ns()
        dt_ns = t1 - self.last_emit - (phases_ns - self.phases_at)
        self.last_emit, self.phases_at = t1, phases_ns
        return Step(
            run_id=self.run_id,
            step=self.steps,
            kind=kind,
            token_ids=new,
            text=delta,
            n_tokens=len(new),
            t_ns=t1,
            dt_ns=dt_ns,
            forward_ns=forward_ns,
            kv_bytes=kv_used,
            kv_alloc_bytes=kv.alloc_bytes,
            seq_len=kv.seq_len,
            segment=self.segment,
            proposed=proposed,
            accepted=accepted,
            compute_ns=compute_ns,
            drafted_chars=drafted_chars,
            rejected_text=rejected_text,
            confidence=[round(x, 4) for x in p],
            token_chars=chars,
            batch=rows,
            waiting=waiting,
            batch_tokens=batch_tokens,
            phase=self.phases.of(delta, len(new)) if self.phases is not None else ANSWER,
        )
