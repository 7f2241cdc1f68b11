"""Each check's one line, the report of them all (rewritten after each), and the comparisons they judge by."""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.gpu_check import LEVER_GROUPS


@dataclass
class Check:
    status: str  # PASS, FAIL or SKIP
    name: str
    figure: str = ""
    reference: str = ""
    reason: str = ""
    seconds: float = 0.0

    def cells(self) -> list[str]:
        return [self.status, self.name, self.figure or "-", self.reference or "-", self.reason or "-"]

    def line(self) -> str:
        return " | ".join(self.cells())


class Skip(Exception):
    """A check that cannot run here; the message says why."""


class Failed(Exception):
    """A check that ran and disagreed: its figure and reference go into the report beside the reason."""

    def __init__(self, reason: str, figure: str = "", reference: str = ""):
        super().__init__(reason)
        self.figure, self.reference = figure, reference


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_check(name: str, fn) -> Check:
    """`fn()` returns (figure, reference); raises Skip or Failed, or anything else, which is a FAIL with its type."""
    t0 = time.perf_counter()
    try:
        figure, reference = fn()
        check = Check("PASS", name, figure, reference)
    except Skip as exc:
        check = Check("SKIP", name, reason=one_line(exc))
    except Failed as exc:
        check = Check("FAIL", name, exc.figure, exc.reference, one_line(exc))
    except Exception as exc:  # noqa: BLE001 - one broken check is reported and the others still run
        check = Check("FAIL", name, reason=one_line(f"{type(exc).__name__}: {exc}"))
    check.seconds = time.perf_counter() - t0
    return check


class Report:
    """The checks so far as a Markdown file, rewritten after each one; logs of subprocesses beside."""

    def __init__(self, path: Path, header: list[str], budget_s: float, only: str = "", echo=print, start_at: str = ""):
        self.path, self.header, self.only, self.echo = path, header, only, echo
        self.start_at = start_at  # a second run goes on where the first one's budget ended
        self.deadline = time.monotonic() + budget_s
        self.budget_s = budget_s
        self.checks: list[Check] = []
        self.logs: dict[str, str] = {}

    def check(self, name: str, fn) -> Check | None:
        if self.start_at and self.start_at not in name:
            return None
        self.start_at = ""
        if self.only and not any(part in name for part in self.only.split("|")):
            return None
        if time.monotonic() > self.deadline:
            result = Check("SKIP", name, reason=f"the time budget ({self.budget_s:.0f} s) is spent; rerun with --start-at '{name}'")
        else:
            # In the report while it runs: a run killed at the command's time limit shows which check hung.
            self.checks.append(Check("FAIL", name, reason="did not finish: the run was stopped during this check"))
            self.write()
            result = run_check(name, fn)
            self.checks.pop()
        self.checks.append(result)
        self.echo(result.line(), flush=True)
        self.write()
        return result

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in ("PASS", "FAIL", "SKIP")}

    def markdown(self) -> str:
        counts = self.counts()
        lines = ["# tokentop GPU check", "", *[f"- {h}" for h in self.header], f"- {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP", ""]
        lines += ["| status | check | figure | reference | reason | s |", "|---|---|---|---|---|---|"]
        for c in self.checks:
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in c.cells()) + f" | {c.seconds:.1f} |")
        for title, text in self.logs.items():
            lines += ["", f"## {title}", "", "```", text.rstrip(), "```"]
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(self.markdown())


def agree(ours: float, ref: float, rel: float, abs_: float = 0.0, unit: str = "", what: str = "") -> tuple[str, str]:
    """(figure, reference) when |ours − ref| ≤ abs_ + rel·|ref|; else Failed."""
    figure, reference = f"{ours:.4g}{unit}", f"{ref:.4g}{unit}"
    if abs(ours - ref) > abs_ + rel * abs(ref):
        raise Failed(f"{what or 'reading'} off by {ours - ref:+.4g}{unit} (allowed ±{abs_ + rel * abs(ref):.4g}{unit})", figure, reference)
    return figure, reference


def parse_csv(text: str) -> list[list[str]]:
    """nvidia-smi's `--format=csv,noheader,nounits`: one row a line, cells trimmed; '[N/A]' stays as is."""
    return [[cell.strip() for cell in line.split(",")] for line in text.splitlines() if line.strip()]


def lever_cases() -> list[tuple[str, dict]]:
    """Every lever alone, then every pair of levers from two different groups."""
    singles = [(name, combo, group) for group, levers in LEVER_GROUPS.items() for name, combo in levers.items()]
    cases = [(name, combo) for name, combo, _ in singles]
    for (a, ca, ga), (b, cb, gb) in itertools.combinations(singles, 2):
        if ga != gb:
            cases.append((f"{a}+{b}", {**ca, **cb}))
    return cases


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two outputs differ (a length difference counts), None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):  # the shorter one's end is checked below
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def near_tie_tolerance(dtype_eps: float, logits_scale: float) -> float:
    """How far apart two logits may be and still swap under a different kernel's rounding: a few
    ulps of the largest logit, as each of a deep model's layers rounds in the working precision."""
    return 4 * dtype_eps * logits_scale + 1e-3


def judge_greedy(plain: list[int], got: list[int], lossless: bool, gap_at=None, tolerance: float = 0.0) -> tuple[str, str]:
    """A lossless lever must give plain's greedy tokens, except at a near-tie (`gap_at(i)`: plain's
    logit gap there between its choice and the lever's); a lossy one (int8/int4) is reported only:
    on random weights its differences say nothing of its quality."""
    i = first_difference(plain, got)
    reference = f"plain greedy, {len(plain)} tokens"
    if i is None:
        return f"same {len(got)} tokens", reference
    if not lossless:
        return f"first differs at token {i}", reference + " (lossy: reported, not judged)"
    if i >= min(len(plain), len(got)):
        raise Failed(f"{len(got)} tokens where plain gave {len(plain)}", f"{len(got)} tokens", reference)
    gap = gap_at(i) if gap_at is not None else float("inf")
    if gap <= tolerance:
        return f"same up to token {i}, a near-tie there (gap {gap:.3g} ≤ {tolerance:.3g})", reference
    raise Failed(f"greedy output differs from plain at token {i}, logit gap {gap:.3g} > {tolerance:.3g}", f"differs at {i}", reference)


def pytest_summary(text: str) -> str:
    """pytest -q's last line: '3 passed, 2 skipped in 4.1s'."""
    found = re.findall(r"^=*\s*(\d+ (?:passed|failed|skipped|error|errors|deselected|xfailed).*?)\s*=*$", text, re.M)
    return found[-1] if found else one_line(text.strip().splitlines()[-1] if text.strip() else "no output")
