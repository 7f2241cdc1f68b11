"""The engine process: load the model, then take commands from the UI's queue and answer with events."""

from __future__ import annotations

import gc
import multiprocessing as mp
import traceback

from monitors.events import EngineError
from tui_app.engine.config import EngineConfig
from tui_app.process import quiet_process


def engine_main(config: EngineConfig, commands: mp.Queue, events: mp.Queue, log_path: str | None) -> None:
    """The engine process's entry point (spawned by tui_app.process.EngineProcess)."""
    if not quiet_process(log_path, events):
        return
    # torch's and transformers' imports and the model's load make millions of objects that live
    # as long as the engine; collecting while they are made cost 0.4-1 s of the start (measured).
    # load() ends with a collection and gc.freeze(), which takes them out of later collections.
    gc.disable()
    from tui_app.engine.generation import Engine
    from tui_app.engine.models import ModelError

    engine = Engine(config, events.put)
    try:
        engine.load()
    except ModelError as exc:
        events.put(EngineError(message=str(exc), fatal=True))
        return
    except Exception as exc:  # noqa: BLE001 - anything else is reported, not printed over the UI
        events.put(EngineError(message=f"loading failed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}", fatal=True))
        return
    gc.enable()
    engine.serve(commands)
