"""First on the PYTHONPATH of a script tokentop watches (tui_app/attach/script.py): Python runs it
before the script's first line. It loads the hook (attach/script_hook.py) and tokentop's monitors
from their own files, so tokentop's folder is never on the script's path (where its packages could
hide the script's own), and then runs the sitecustomize this one hides, if there is one."""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FD_ENV = "TOKENTOP_EVENTS_FD"


def _load(name: str, path: str, package: bool = False):
    where = [os.path.dirname(path)] if package else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=where)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _watch() -> None:
    fd = os.environ.pop(FD_ENV, None)  # popped: the script's own children are not watched on it
    if fd is None:
        return
    attach = os.path.dirname(HERE)
    try:
        _load("monitors", os.path.join(os.path.dirname(os.path.dirname(attach)), "monitors", "__init__.py"), package=True)
        hook = _load("_tokentop_hook", os.path.join(attach, "script_hook.py"))
        hook.install(int(fd))
    except Exception as exc:  # noqa: BLE001 - the script runs on, unwatched, and says why once
        print(f"tokentop: not watching this script: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:  # the hook holds what it needs; a `monitors` of the script's own imports as its own
        for name in [n for n in sys.modules if n == "monitors" or n.startswith("monitors.")]:
            del sys.modules[name]


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


_watch()
_chain()
