"""A serving bench's progress on stderr: on a terminal, one line redrawn in place (a bar, the cell,
its requests, the time left); elsewhere (a log, CI) one line per cell as it ends. The time left is
the time so far per request times the requests still to send: cells of an open loop take the time
their schedule takes, so early on it is an estimate."""

from __future__ import annotations

import sys
import time

WIDTH = 24
REDRAW_S = 0.25


def eta_text(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "?"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


class Progress:
    def __init__(self, total_requests: int, cells: int, stream=None, tty: bool | None = None, sink=None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.total = max(total_requests, 1)
        self.cells = cells
        self.done = 0
        self.cell = 0
        self.label = ""
        self.cell_done = 0
        self.cell_total = 0
        self.t0 = time.perf_counter()
        self.cell_t0 = self.t0
        self._drawn = 0.0
        self.sink = sink  # also told every change (the --live TUI's progress bar)

    def left_s(self) -> float:
        spent = time.perf_counter() - self.t0
        return spent / self.done * (self.total - self.done) if self.done else float("nan")

    def start_cell(self, label: str, requests: int) -> None:
        self.cell += 1
        self.label, self.cell_done, self.cell_total = label, 0, requests
        self.cell_t0 = time.perf_counter()
        self._tell()
        self._draw(force=True)

    def request_done(self) -> None:
        self.done += 1
        self.cell_done += 1
        self._tell()
        self._draw()

    def skip(self, requests: int) -> None:
        """Requests a cell will not send (a sweep's step stopped early, or the sweep ended)."""
        self.total = max(self.total - requests, self.done, 1)

    def end_cell(self) -> None:
        took = time.perf_counter() - self.cell_t0
        if self.tty:
            self._draw(force=True)
        elif self.sink is None:  # a sink (the --live TUI) shows it instead
            print(
                f"tokentop: cell {self.cell}/{self.cells} {self.label}: {self.cell_done} requests in {took:.1f} s; ~{eta_text(self.left_s())} left",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self.tty:
            print(file=self.stream, flush=True)

    def state(self) -> dict:
        return {
            "cell": self.cell,
            "cells": self.cells,
            "label": self.label,
            "cell_done": self.cell_done,
            "cell_total": self.cell_total,
            "done": self.done,
            "total": self.total,
            "left_s": self.left_s(),
        }

    def _tell(self) -> None:
        if self.sink is not None:
            self.sink(self.state())

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not self.tty or (not force and now - self._drawn < REDRAW_S):
            return
        self._drawn = now
        filled = WIDTH * self.done // self.total
        text = (
            f"\r[{'█' * filled}{'·' * (WIDTH - filled)}] cell {self.cell}/{self.cells} {self.label} "
            f"{self.cell_done}/{self.cell_total}, ~{eta_text(self.left_s())} left "
        )
        print(text, end="", file=self.stream, flush=True)
