"""tokentop: watch an LLM generate, live."""

__version__ = "0.1.0"


def watch(model, tokenizer=None) -> None:
    """Send this model's generation (generate() calls, and loops over model(...)) to a `tokentop
    listen` in a terminal; a missing or slow listener never holds it up (tui_app/attach/watch.py)."""
    from tui_app.attach.watch import watch as send_to_listener

    send_to_listener(model, tokenizer)
