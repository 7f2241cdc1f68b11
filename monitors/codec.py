"""The event stream on disk and on the wire: one JSON object per line, and back without loss.
Readers of a newer source's stream skip the event types they do not know (UnknownEventType)."""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, fields

from monitors.events import (
    AllocatorHistory,
    Anatomy,
    Bandwidth,
    EngineError,
    EngineReady,
    ExpertLoad,
    FleetReady,
    FleetSample,
    LeverChanged,
    LeverRefused,
    Levers,
    OtlpStatus,
    Phase,
    RequestSent,
    RunFinished,
    RunStarted,
    Sampled,
    ServerSample,
    ServerTiming,
    Step,
    TorchMemory,
)

EVENT_TYPES = {
    cls.__name__: cls
    for cls in (
        EngineReady,
        Phase,
        RunStarted,
        Step,
        LeverChanged,
        LeverRefused,
        TorchMemory,
        AllocatorHistory,
        Anatomy,
        RunFinished,
        ExpertLoad,
        Sampled,
        ServerSample,
        Bandwidth,
        RequestSent,
        ServerTiming,
        OtlpStatus,
        EngineError,
        FleetReady,
        FleetSample,
    )
}
_FIELDS = {cls: tuple(f.name for f in fields(cls)) for cls in EVENT_TYPES.values()}
# A field at its constant default (0, "", None, an empty list) is left out of the line, and from_dict
# gives it back: a Step of a plain run then carries none of speculation's, the confidence's or a
# batch's fields, a third of its bytes. Fields made by a factory of their own (t_ns) are always written.
_DEFAULTS: dict[type, dict[str, object]] = {
    cls: {f.name: [] if f.default_factory is list else f.default for f in fields(cls) if f.default is not MISSING or f.default_factory is list}
    for cls in EVENT_TYPES.values()
}
Event = (
    EngineReady
    | Phase
    | RunStarted
    | Step
    | LeverChanged
    | LeverRefused
    | TorchMemory
    | AllocatorHistory
    | Anatomy
    | RunFinished
    | ExpertLoad
    | Sampled
    | ServerSample
    | Bandwidth
    | RequestSent
    | ServerTiming
    | OtlpStatus
    | EngineError
    | FleetReady
    | FleetSample
)


def to_json(event: Event) -> str:
    # Fields by name, not dataclasses.asdict: asdict deep-copies every list and dict, which is two
    # thirds of the recorder's cost per event at a fast server's 2,000 chunks a second (profiled).
    data: dict = {"type": type(event).__name__}
    defaults = _DEFAULTS[type(event)]
    for name in _FIELDS[type(event)]:
        value = getattr(event, name)
        if name in defaults and value == defaults[name] and type(value) is type(defaults[name]):
            continue
        data[name] = asdict(value) if isinstance(value, Levers) else value
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class EventDecodeError(ValueError):
    pass


class UnknownEventType(EventDecodeError):
    """A well-formed event of a type this version does not know (a newer source's): readers that
    only draw what they know may skip it instead of stopping."""

    def __init__(self, kind: str):
        super().__init__(f"not a tokentop event of this version (unknown type {kind!r})")
        self.kind = kind


def from_dict(data: dict) -> Event:
    kind = data.get("type") if isinstance(data, dict) else None
    if isinstance(kind, str) and kind and kind not in EVENT_TYPES:
        raise UnknownEventType(kind)
    try:
        cls = EVENT_TYPES[data["type"]]
    except (KeyError, TypeError):
        raise EventDecodeError(f"not a tokentop event (type {data.get('type') if isinstance(data, dict) else data!r})") from None
    kwargs = {}
    names = {f.name for f in fields(cls)}
    for key, value in data.items():
        if key == "type":
            continue
        if key not in names:
            raise EventDecodeError(f"{cls.__name__} has no field {key!r}")
        if key == "levers":
            if not isinstance(value, dict):
                raise EventDecodeError("levers must be an object")
            value = Levers(**value)
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise EventDecodeError(f"{cls.__name__}: {exc}") from None


def from_json(line: str) -> Event:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EventDecodeError(f"invalid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise EventDecodeError("not a JSON object")
    return from_dict(data)
