"""First on the PYTHONPATH of a script tokentop watches (tui_app/attach/script.py): Python runs it
before the first line of the script and of each Python process the script starts (they inherit the
path and the socket's name). It waits for the process to import transformers (a process that never
does, a shell tool or a worker, pays only the standard library's import of this file); then it loads
the hook (attach/script_hook.py, script_loop.py, hook_writer.py) and tokentop's monitors from their
own files, so tokentop's folder is never on the script's path (where its packages could hide the
script's own). It runs the sitecustomize this one hides, if there is one."""

import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOCKET_ENV = "TOKENTOP_EVENTS_SOCKET"
OURS = ("monitors", "tui_app")  # the packages the hook is loaded as, lent to it from sys.modules


class _WhenTransformers:
    """A meta path finder that finds nothing: it loads the hook as transformers is first imported
    (with the socket's name read at the start: the script may have changed its environment since)."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path

    def find_spec(self, name, path=None, target=None):
        if name == "transformers":
            sys.meta_path.remove(self)
            _watch(self.socket_path)
        return None


def _load(name: str, path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=[os.path.dirname(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _watch(path: str) -> None:
    attach = os.path.dirname(HERE)
    app = os.path.dirname(attach)
    theirs = {n: sys.modules.pop(n) for n in list(sys.modules) if n.split(".")[0] in OURS}
    try:  # the packages' own __init__ files: a docstring and a version, nothing imported
        _load("monitors", os.path.join(os.path.dirname(app), "monitors", "__init__.py"))
        _load("tui_app", os.path.join(app, "__init__.py"))
        _load("tui_app.attach", os.path.join(attach, "__init__.py"))
        importlib.import_module("tui_app.attach.script_hook").install(path)
    except Exception as exc:  # noqa: BLE001 - the script runs on, unwatched, and says why once
        print(f"tokentop: not watching this script: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:  # the hook holds what it needs; the script's own `monitors` or `tui_app`, if any, is its own again
        for name in [n for n in sys.modules if n.split(".")[0] in OURS]:
            del sys.modules[name]
        sys.modules.update(theirs)


def _chain() -> None:
    ours = sys.modules.pop("sitecustomize", None)
    kept = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = kept
        if ours is not None:
            sys.modules.setdefault("sitecustomize", ours)


if os.environ.get(SOCKET_ENV):
    sys.meta_path.insert(0, _WhenTransformers(os.environ[SOCKET_ENV]))
_chain()
