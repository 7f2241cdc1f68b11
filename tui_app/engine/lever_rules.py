"""The lever rules that hang on the other levers and the run's options alone, not on the model or
its device. The engine checks them with the rest (lever_control.py); the command line checks them
before the model loads, so that a combination no model could run is refused at once, not after a
load of several seconds. Free of torch for that reason."""

from __future__ import annotations

from dataclasses import replace

from monitors.events import BATCH_SIZES, QUANT_LEVELS, SPEC_MODES, THINK_BUDGETS, Levers

# The order in which the engine applies the levers a command line asks for, once it has loaded.
ORDER = ("quant", "compile", "cache", "spec", "batch", "think")
BUDGET_SPEC = "a speculative step makes several tokens at once and could pass the thinking budget; turn one of them off first"
DISTINCT_COMPILE = (
    "the compiled step has no attention mask, which distinct prompts' padding needs; batch 1 to compile, or start with --batch-prompts replicated"
)


def refusal(name: str, value, lev: Levers, temperature: float, batch_prompts: str) -> str | None:
    """Why `value` of lever `name` cannot join the levers `lev`, or None."""
    distinct = batch_prompts == "distinct"
    if name == "quant":
        return None if value in QUANT_LEVELS else f"quantization must be one of {', '.join(QUANT_LEVELS)}"
    if name == "spec":
        if value not in SPEC_MODES:
            return f"speculative mode must be one of {', '.join(SPEC_MODES)}"
        if value == "off":
            return None
        if temperature > 0:
            return "speculative decoding here verifies greedily; it needs --temperature 0"
        if lev.batch != 1:
            return "speculative decoding verifies one sequence; set batch size 1 first"
        if not lev.cache:
            return "speculative verification needs the KV cache; turn the cache on first"
        if lev.compile:
            return "verify steps are multi-token and the compiled graph is single-token; turn compile off first"
        return BUDGET_SPEC if lev.think else None
    if name == "cache":
        if not value and lev.spec != "off":
            return "speculative decoding needs the KV cache; turn speculation off first"
        if not value and lev.compile:
            return "compile runs on a static KV cache; turn compile off first"
        return None
    if name == "compile":
        if value and not lev.cache:
            return "compile needs the (static) KV cache; turn the cache on first"
        if value and lev.batch != 1 and distinct:
            return DISTINCT_COMPILE
        if value and lev.spec != "off":
            return "verify steps are multi-token and the compiled graph is single-token; turn speculation off first"
        return None
    if name == "think":
        if value not in THINK_BUDGETS:
            return f"the thinking budget must be one of {', '.join(map(str, THINK_BUDGETS))} (0: off, -1: no thinking)"
        if value and lev.spec != "off":
            return BUDGET_SPEC
        if value and lev.batch != 1 and distinct:
            return "the budget closes the run's own think span, and a batch of distinct prompts holds others; set batch 1 first"
        return None
    if name == "batch":
        if value not in BATCH_SIZES:
            return f"batch size must be one of {', '.join(map(str, BATCH_SIZES))}"
        if value != 1 and lev.spec != "off":
            return "speculative decoding verifies one sequence; turn speculation off first"
        if value != 1 and distinct and lev.think:
            return "the thinking budget closes the run's own think span, and distinct prompts would be others; turn the budget off first"
        if value != 1 and distinct and lev.compile:
            return DISTINCT_COMPILE
        return None
    return f"unknown lever {name!r}"


def refused_at_start(asked: Levers, temperature: float, batch_prompts: str) -> list[tuple[str, object, str]]:
    """(lever, value, reason) for each lever asked for that the others refuse, each checked against
    those applied before it in ORDER from the defaults, as the engine applies them once loaded."""
    lev, out = Levers(), []
    for name in ORDER:
        value = getattr(asked, name)
        if value == getattr(lev, name):
            continue
        if why := refusal(name, value, lev, temperature, batch_prompts):
            out.append((name, value, why))
        else:
            lev = replace(lev, **{name: value})
    return out
