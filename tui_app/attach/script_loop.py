"""A hand-written decode loop over `model(...)` in a watched script (attach/script_hook.py): the
forwards outside generate() of a model that can generate, seen by a forward pre-hook and a forward
hook, and read as runs.

A forward goes on the run before it in two ways: with the cache the last forward returned, or
without a cache, its input the last forward's plus one token (the loop that feeds the whole
sequence back each step, the first loop most people write: its run says its cache is off and
why, and holds no KV). Any other forward begins a run with its input as the prompt: a new prompt,
a chat's next turn, a cache the loop did not get from the last forward. Each forward that goes on
is fed the token the one before chose, as its input's last: that token's step, stamped when the
loop feeds it back. The last forward's token is never fed back, so it is not counted. An MoE's
routing is counted over every forward of the run, read as the run ends (the next run's first
forward, a generate() or the script's end), as a generate()'s is.

Which way a run goes on is known at its second forward, so its start is sent then (stamped at
its first), with the cache as it is; a run of one forward sends its start as it ends."""

from __future__ import annotations

from monitors.events import now_ns

NO_CACHE = "your loop re-reads the whole context each step"


class Loop:
    def __init__(self, hook, make_call):
        self.hook, self.make_call = hook, make_call
        self.call = None
        self.cache = None  # what the last forward returned
        self.ids = None  # the last forward's input, where the next may go on without a cache
        self.pending: tuple | None = None  # (t, row 0's ids, rows) of a run's first forward, its start not yet sent
        self.routed: list = []  # an MoE's count tensors, zeroed as a run begins, read as it ends

    def pre(self, model, args, kwargs) -> None:
        if getattr(self.hook.local, "inside", False):
            return
        t = now_ns()
        ids = kwargs.get("input_ids", args[0] if args else None)
        if getattr(ids, "ndim", 0) != 2:  # embeddings fed in: no tokens to follow
            return
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        call = self.call
        if call is not None and call.model is model:
            if cache is not None and cache is self.cache:
                self._goes_on(t, ids, cached=True)
                return
            if cache is None and self._extends(ids):
                self._goes_on(t, ids, cached=False)
                return
        self.end(t)
        self.call = self.make_call(self.hook, model, next(self.hook.runs), {"use_cache": kwargs.get("use_cache")})
        self.call.t0 = self.call.last = t
        self.call.cache = cache
        if not self.call.cached:  # use_cache=False in the loop's own call
            self.call.cache_note = NO_CACHE
        self.pending = (t, ids[0], ids.shape[0])
        self.routed = self.hook.counts(model)
        self._keep(ids if cache is None else None)

    def post(self, model, args, kwargs, output) -> None:
        if getattr(self.hook.local, "inside", False) or self.call is None:
            return
        if self.pending is None and not self.call.cached:
            return  # its caches are thrown away each step: neither kept here nor measured
        cache = getattr(output, "cache", None)
        self.cache = cache if cache is not None else getattr(output, "past_key_values", None)
        self.call.cache = self.cache

    def end(self, t: int) -> None:
        if self.call is not None:
            self._start()
            self.hook.finish(self.call, t, "the loop ended", None, self.routed)
            self.call = self.cache = self.ids = None

    def _goes_on(self, t: int, ids, cached: bool) -> None:
        call = self.call
        if self.pending is not None:
            if not cached:
                call.cached, call.cache_note = False, NO_CACHE
                call.cache = self.cache = None
            self._start()
        self._keep(None if cached else ids)
        self.hook.writer.put(call.tokens, t, ids[0, -1:], ids.shape[0])

    def _start(self) -> None:
        if self.pending is not None:
            t, prompt, rows = self.pending
            self.pending = None
            self.hook.writer.put(self.call.started, t, prompt, rows)

    def _keep(self, ids) -> None:
        """The input a next forward without a cache may extend (None: none may). On a CPU a copy,
        compared in full by the next forward (microseconds beside a forward over the same tokens);
        on a device its shape alone, as comparing would wait on the device."""
        if ids is None or ids.device.type == "cpu":
            self.ids = None if ids is None else ids.detach().clone()
        else:
            self.ids = tuple(ids.shape)

    def _extends(self, ids) -> bool:
        last = self.ids
        if last is None:
            return False
        shape = last if isinstance(last, tuple) else tuple(last.shape)
        if ids.shape[0] != shape[0] or ids.shape[1] != shape[1] + 1:
            return False
        return isinstance(last, tuple) or ids[:, :-1].equal(last)
