"""tokentop's Python API, for code that would rather call it than run under `tokentop -- …`:

    import tokentop
    tokentop.watch(model, tokenizer)   # in a notebook; `tokentop listen` shows it in a terminal

The distribution's own name, so the one import a user guesses is the one that works. It is a
single module that loads nothing until it is called: importing it costs a notebook neither
Textual nor tokentop's packages (the work is in tui_app/attach/watch.py).
"""

__all__ = ["watch"]


def watch(model, tokenizer=None) -> None:
    """Send this model's generation (generate() calls, and loops over model(...)) to a `tokentop
    listen` in a terminal; `tokenizer` detokenizes (by default the tokenizer made last). A missing
    or slow listener never holds generation up."""
    from tui_app.attach.watch import watch as send_to_listener

    send_to_listener(model, tokenizer)
