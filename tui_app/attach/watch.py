"""`tokentop.watch(model, tokenizer)`: a notebook's (or any process's) generation sent to a
`tokentop listen` running in a terminal, over a Unix socket in tokentop's cache folder that only
this user can open (attach/listen.py makes it).

The same hook as a watched script's (attach/script_hook.py: generate() and loops over model(...)),
sending to the listener's socket through the same writer (attach/hook_writer.py): generation never
waits on the listener, and one that comes back is sent the model and the run in progress first.
"""

from __future__ import annotations

import atexit
import functools
import os
import weakref
from pathlib import Path

from tui_app.attach.hook_writer import Writer
from tui_app.attach.script_hook import Hook

_hook: Hook | None = None
_watched: weakref.WeakSet = weakref.WeakSet()


def socket_path() -> Path:
    """Where `tokentop listen` listens: TOKENTOP_LISTEN, else listen/tokentop.sock in the cache folder."""
    from tui_app.folders import cache_root

    return Path(os.environ.get("TOKENTOP_LISTEN") or cache_root() / "listen" / "tokentop.sock")


def watch(model, tokenizer=None) -> None:
    """Send this model's generation (its generate() calls and forwards of loops over it) to
    `tokentop listen`; `tokenizer` detokenizes (by default the tokenizer made last)."""
    global _hook
    if _hook is None:
        _hook = Hook(Writer(socket_path()))
        _hook.writer.start()
        atexit.register(_hook.close)
        os.register_at_fork(after_in_child=_hook.forked)
    if tokenizer is not None:
        _hook.latest = weakref.ref(tokenizer)
    if model in _watched:
        return
    _watched.add(model)
    model.generate = functools.partial(_hook.generate, type(model).generate, model)
    model.register_forward_pre_hook(_hook.loop.pre, with_kwargs=True)
    model.register_forward_hook(_hook.loop.post, with_kwargs=True)
