"""When the app draws a frame, and how fast the terminal takes them.

Frames come at --fps. A key's effect is drawn at the key, not at the next frame. And frames never
queue up behind a slow terminal: after each frame the app asks the terminal where its cursor is
(DSR 6, `ESC [ 6 n`), a question every VT100-style terminal answers once it has taken in all that
came before; tmux, screen, xterm and the terminal at the far end of an SSH link among them. An
answer's round trip, less the link's own (the quickest lately), is how long that frame waited
behind the output before it: the queue. While it is short, frames follow each other on the link
(a frame is drawn unless one is unanswered past the link's round trip and a frame). Once it is
longer than half a frame the terminal cannot take the output: a frame is drawn only when the ones
before it are all answered, the frames between are skipped (their events still go into the
session), and the next frame drawn shows the latest state, never a stale one. Writes blocking
would say it far too late: sshd and TCP buffer megabytes before a write blocks, a minute at
256 kbit/s.

In the automatic mode (--fps auto, the default) the clock itself follows: frames come at most
as often as the terminal answers while it is slow (down to MIN_FPS), and at 4 a second again as
soon as an answer comes back without a queue. The status line says "slow terminal: N fps" while
frames are held back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence

from textual import events
from textual.app import App
from textual.filter import LineFilter

from monitors.events import Sampled, ServerSample, Step
from tui_app.ui.look import Look, apply_theme
from tui_app.ui.terminal import AsciiFilter, SixteenColors

AUTO_FPS = 4.0  # by measurement: at 8 the UI took 30 % of a core on a 2-core machine and slowed decode
MIN_FPS = 0.5
POLL_S = 0.05  # the look for a first answer: the engine's first figures, or a key's reply
FIRST_DATA_S = 5.0  # past this (an engine loading its model) the frame timer alone draws
KEY_REPLY_S = 1.0  # how long a key's reply from the engine is looked for at POLL_S
SLACK_S = 0.05  # a late answer within this of its due time is the machine's hiccup, not a slow link
QUEUED = 1.0  # frames: answers that wait longer than this behind the output before them say the terminal cannot keep up
SUSTAINED = 2  # answers in a row
RTT_WINDOW = 32  # answers behind the link's own round trip (the quickest of them)
RATE_WINDOW_S = 4.0  # the frame rate said in the status line: frames drawn over this long
LOST_S = 30.0  # a question unanswered this long is taken as lost, and frames go on (an answer the terminal never sent)
ASK = "\x1b[6n"  # DSR 6: the terminal answers ESC [ row ; col R


def parse_fps(value) -> tuple[float, bool]:
    """--fps as (frames per second, automatic)."""
    if value in (None, "auto"):
        return AUTO_FPS, True
    return max(1.0, min(float(value), 60.0)), False


class FramePacer:
    """The app's frame clock (one timer, re-armed each time, so its period can change)."""

    def __init__(self, app: PacedApp, fps):
        self.app = app
        self.fps, self.auto = parse_fps(fps)
        self.interval = 1.0 / self.fps
        self.asked: deque[float] = deque()  # when each unanswered question was sent, oldest first
        self.rtts: deque[float] = deque(maxlen=RTT_WINDOW)
        self.drawn: deque[float] = deque(maxlen=int(60 * RATE_WINDOW_S))
        self.skips: deque[float] = deque(maxlen=int(60 * RATE_WINDOW_S))  # when frames were skipped
        self._next = 0.0
        self._first_until = 0.0
        self._reply_until = 0.0
        self.queued: deque[float] = deque(maxlen=SUSTAINED)  # seconds the last answers waited behind the output before them
        self._timer: asyncio.TimerHandle | None = None
        self.shown_note: str | None = None  # what the status line last said of the terminal

    # ------------------------------------------------------------ the clock
    def start(self) -> None:
        now = time.monotonic()
        self._first_until = now + FIRST_DATA_S
        self._next = now
        # Asked before the first frame, whose answer then takes the link's round trip alone: asked
        # behind the first screen (20-30 KB), it would take that screen's time on the link too, and
        # the link would seem that slow.
        self._ask()
        self._arm(0.0)

    def _arm(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.app.call_in(delay, self._wake)

    def _wake(self) -> None:
        now = time.monotonic()
        app = self.app
        if now < self._first_until:  # until the first figures, look every POLL_S and draw when they come
            if self.behind(now):
                app.feed()
            else:
                self._draw(now, first=True)
            if app.first_data_in():
                self._first_until = 0.0
            self._arm(POLL_S)
            return
        if now >= self._next:
            self._next = max(self._next + self.interval, now + self.interval / 2)
            if self.behind(now):
                self.skips.append(now)
                app.feed()
                if (self.note(now) is None) != (self.shown_note is None):  # the status line says so: a line, not a frame
                    app.show_status()
            else:
                self._draw(now)
        elif now < self._reply_until and _replies(app.feed()):
            self._reply_until = 0.0
            self._draw(now)
        self._arm(min(self._next - now, POLL_S) if now < self._reply_until else self._next - now)

    def _draw(self, now: float, first: bool = False) -> None:
        self.drawn.append(now)  # before the frame: the rate its status line says counts the frame itself
        self.app.tick(first)
        if self.asked and now - self.asked[0] > LOST_S:
            self.asked.clear()
        self.app.call_after_refresh(self._ask)  # after the frame's own bytes: its answer comes behind them

    def key(self) -> None:
        """A key was handled: the status line, where its effect shows (a lever's new value, the
        state), is drawn now, the panes with the next frame; the engine's reply to it (a lever
        switched, a run started) is drawn as soon as it comes, not at the next frame."""
        now = time.monotonic()
        self._reply_until = now + KEY_REPLY_S
        self.app.show_status()
        self._arm(min(self._next - now, POLL_S))

    # ------------------------------------------------------------ the terminal's answers
    def _ask(self) -> None:
        if self.app.write_to_terminal(ASK):
            self.asked.append(time.monotonic())

    def answered(self) -> None:
        if not self.asked:
            return
        now = time.monotonic()
        rtt = now - self.asked.popleft()
        self.rtts.append(rtt)
        self.queued.append(rtt - self.link_rtt())
        if self.auto:  # the clock no faster than the terminal answers, while it is slow
            self.interval = min(max(rtt, 1.0 / self.fps), 1.0 / MIN_FPS) if self.slow() else 1.0 / self.fps
        if self._timer is None or now < self._first_until:
            return
        owed = self.skips and (not self.drawn or self.skips[-1] > self.drawn[-1])
        if owed and not self.asked and now - self.drawn[-1] >= 1.0 / self.fps:
            self._next = now  # the terminal has taken everything in: the frame held back, now
            self._arm(0.0)
        elif self._next > now + self.interval:  # the next frame no later than a frame from now
            self._next = now + self.interval
            self._arm(self.interval)

    def slow(self) -> bool:
        """Whether the last answers each waited behind more output than the terminal takes in a
        frame (one big frame, a run's first, is a moment's queue: the next frames pass it)."""
        return len(self.queued) == SUSTAINED and min(self.queued) > QUEUED / self.fps

    def link_rtt(self) -> float:
        """The link's own round trip: the quickest answer lately (output queued adds to the others)."""
        return min(self.rtts, default=0.0)

    def behind(self, now: float) -> bool:
        """Whether a frame now would queue behind others: while the terminal is slow, any frame
        still unanswered; otherwise one unanswered past the link's round trip and a frame. Only
        once the terminal has answered at all: one that never does is drawn on the clock alone."""
        if not (self.asked and self.rtts):
            return False
        waited = now - self.asked[0]
        if waited > LOST_S:
            return False
        return self.slow() or waited > self.link_rtt() + 1.0 / self.fps + SLACK_S

    # ------------------------------------------------------------ what the status line says
    def rate(self, now: float | None = None) -> float:
        """Frames drawn per second lately (over RATE_WINDOW_S, or since the first)."""
        now = time.monotonic() if now is None else now
        if not self.drawn:
            return self.fps
        span = min(RATE_WINDOW_S, now - self.drawn[0])
        return sum(1 for t in self.drawn if now - t <= RATE_WINDOW_S) / span if span > 0 else self.fps

    def status_note(self) -> str | None:
        """The note for the status line being drawn now."""
        self.shown_note = self.note()
        return self.shown_note

    def note(self, now: float | None = None) -> str | None:
        """ "slow terminal: N fps" while the terminal holds the frames back (frames skipped lately,
        or the automatic rate lowered) and they come at less than 0.8 of the rate asked for."""
        now = time.monotonic() if now is None else now
        held = (self.skips and now - self.skips[-1] <= RATE_WINDOW_S) or self.interval > 1.25 / self.fps
        rate = self.rate(now)
        return f"slow terminal: {rate:.1f} fps" if held and rate < 0.8 * self.fps else None


def _replies(evs: list) -> bool:
    """Whether events answer a command (anything but the stream of steps and samples)."""
    return any(not isinstance(ev, (Step, Sampled, ServerSample)) for ev in evs)


EXIT_GRACE_S = 10.0  # from SIGTERM or SIGHUP to leaving without Textual's shutdown: an engine stopping in a compile takes a few seconds


def _leave_after(seconds: float, code: int) -> None:
    time.sleep(seconds)
    os._exit(code)


class PacedApp(App):
    """An App whose frames a FramePacer clocks; keys drawn at once, the terminal's answers read;
    drawn in plain ASCII (`ascii`) and in 16 colours where the terminal has no more (terminal.py)."""

    def __init__(self, *args, look: Look | None = None, **kwargs):
        if sys.__stdout__ is not None and sys.__stdout__.isatty():
            # An exported COLUMNS or LINES (a pane's shell that exported them at 80×24 before its
            # first resize) outranks the terminal in what Textual asks (shutil.get_terminal_size):
            # the app kept that size through every resize. The terminal knows its own size.
            for name in ("COLUMNS", "LINES"):
                os.environ.pop(name, None)
        super().__init__(*args, **kwargs)
        self.look = look or Look()
        apply_theme(self, self.look.theme)
        self._handlers: dict[int, object] = {}  # the signal handlers before ours, put back on unmount

    pacer: FramePacer
    colors: int | None = None  # 16: draw in 16 colours; None: as many as the terminal says it has
    _look: list[LineFilter] | None = None

    def get_line_filters(self) -> Sequence[LineFilter]:
        if self._look is None:
            self._look = [AsciiFilter()] if self.look.ascii else []
            terminal = None if self.is_headless else self.console.color_system
            if self.colors == 16 or (self.colors is None and terminal == "standard"):
                self._look.append(SixteenColors())
        return [*super().get_line_filters(), *self._look]

    def feed(self) -> list:
        """The events so far into the session; the panes they change are marked, not drawn."""
        raise NotImplementedError

    def tick(self, first: bool = False) -> None:
        """A frame: the events so far, and the panes they changed drawn (`first`: until the first
        figures are in, each pane that has new data drawn now, its own rate limit aside)."""
        raise NotImplementedError

    def show_status(self) -> None:
        """The status line drawn now."""
        raise NotImplementedError

    def first_data_in(self) -> bool:
        raise NotImplementedError

    def hang_up_on_signals(self) -> None:
        """SIGTERM and SIGHUP quit as q does (`_hang_up`), from the app's start to its end."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(ValueError):  # not the main thread: nothing to hang up
                self._handlers[sig] = signal.signal(sig, lambda signum, _frame: self._hang_up(loop, signum))

    def restore_signals(self) -> None:
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)

    def _hang_up(self, loop: asyncio.AbstractEventLoop, signum: int) -> None:
        """SIGTERM or SIGHUP: quit as q does. A Python handler, not the loop's, because it must run
        while the loop is blocked writing to a terminal that reads no more (a frozen SSH link, a
        suspended terminal): Textual's shutdown then blocks on that same write, for good. So the
        process leaves anyway after EXIT_GRACE_S; every finished run is on disk by then (the
        recording is written through at each run's end) and the engine ends with its parent."""
        threading.Thread(target=_leave_after, args=(EXIT_GRACE_S, 128 + signum), name="tokentop-exit", daemon=True).start()
        loop.call_soon_threadsafe(self.exit)

    def call_in(self, delay: float, callback) -> asyncio.TimerHandle:
        """`callback` on this app's message loop `delay` seconds from now, however late the loop
        comes to it. Not Textual's set_timer: its one-shot Timer reads the clock twice before it
        sleeps, and where its task was held up between the two for longer than the delay (a UI
        thread preempted on a loaded machine, a garbage collection) it skips the tick it missed,
        and a one-shot has no next one: it never fires. The frame clock's 1-ms first frame lost so
        left the app at its first frame for good, its status line never drawn (docs/testing.md).
        As with Textual's timers, nothing is called once the app is leaving (its last picture stays)."""
        return asyncio.get_running_loop().call_later(max(delay, 0.0), self._call_unless_leaving, callback)

    def _call_unless_leaving(self, callback) -> None:
        if self.return_code is None:  # set by exit()
            self.call_next(callback)

    def write_to_terminal(self, text: str) -> bool:
        """Bytes straight to the terminal, behind whatever the app wrote before (False: none here)."""
        driver = self._driver
        if driver is None or self.is_headless or self.is_web:
            return False
        driver.write(text)
        return True

    async def run_action(self, action, default_namespace=None) -> bool:
        done = await super().run_action(action, default_namespace)
        pacer = getattr(self, "pacer", None)
        if pacer is not None and self.is_running and self.return_code is None:
            pacer.key()
        return done

    def on_cursor_position(self, event: events.CursorPosition) -> None:
        self.pacer.answered()
