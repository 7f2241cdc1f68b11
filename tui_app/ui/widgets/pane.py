"""Base of the panes drawn through Textual's line API: strips built in `redraw()` when the app has
marked the pane dirty, at most once a frame (or MAX_HZ), never while hidden; a frame then costs no
text layout. Textual's own `render()` path lays the content out again on every refresh.

A redraw repaints only the lines that changed since the last one (`damage`), and a new border
title only the border's row, at most once a second (TITLE_S): Textual would send the whole pane
to the terminal either way, and a title's figures (ITL p50, RSS) move with every frame."""

from __future__ import annotations

import time

from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from tui_app.ui.damage import damage

TITLE_S = 1.0  # a border title changes at most this often; the newest text waits its turn


class _BorderText:
    """`border_title` / `border_subtitle` for a pane: Textual's own setter repaints the whole
    widget, on every assignment, changed or not; this one repaints the border's row, on a change."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.textual = Widget.__dict__[name]

    def __get__(self, obj, objtype=None):
        return self if obj is None else self.textual.__get__(obj, objtype)

    def __set__(self, obj: LinePane, text) -> None:
        if obj._border_text.get(self.name, ...) == text:
            obj._border_due.pop(self.name, None)
            return
        obj._border_due[self.name] = text
        obj._show_titles()

    def show(self, obj: LinePane, text) -> None:
        obj._border_text[self.name] = text
        obj._border_row = 0 if self.name == "border_title" else -1
        try:
            self.textual.__set__(obj, text)
        finally:
            obj._border_row = None


class LinePane(Widget):
    MAX_HZ: float | None = None  # redraws per second at most; None: every frame that has new data

    border_title = _BorderText()  # type: ignore[assignment]
    border_subtitle = _BorderText()  # type: ignore[assignment]

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        self._border_text: dict[str, object] = {}  # the titles shown
        self._border_due: dict[str, object] = {}  # newer titles waiting for TITLE_S to pass
        self._border_at = 0.0
        self._border_row: int | None = None
        super().__init__(id=id, classes=classes)
        self.dirty = True
        self._strips: list[Strip] = []
        self._drawn_at = 0.0

    def _show_titles(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._border_due and (force or not self.is_mounted or now - self._border_at >= TITLE_S):
            self._border_at = now
            due, self._border_due = self._border_due, {}
            for name, text in due.items():
                LinePane.__dict__[name].show(self, text)

    def redraw(self, force: bool = False) -> None:
        """Called each frame by the app; cheap when nothing changed or the pane is hidden."""
        width, height = self.content_size
        if not self.dirty or not self.display or width <= 0 or height <= 0:
            self._show_titles(force)
            return
        now = time.monotonic()
        if not force and self.MAX_HZ and now - self._drawn_at < 1.0 / self.MAX_HZ:
            self._show_titles(force)
            return  # still dirty: a later frame draws it
        self.dirty = False
        self._drawn_at = now
        # Segments without a background would show the terminal's own, not the pane's; every line
        # is the pane's width, as Textual pads it, so that two frames compare cell by cell.
        base = self.rich_style
        drawn = [strip.apply_style(base).adjust_cell_length(width, base) for strip in self.draw(width, height)[:height]]
        drawn += [Strip.blank(width, base)] * (height - len(drawn))
        self._show_titles(force)  # the titles draw() set
        old, self._strips = self._strips, drawn
        if len(old) != height or (old and old[0].cell_length != width):
            self.refresh()
        else:
            changed = damage(old, drawn)
            if changed:
                self.refresh(*changed)

    @property
    def pending(self) -> bool:
        """Whether the pane has something not yet on screen: new data, or a title waiting its turn."""
        return self.dirty or bool(self._border_due)

    def draw(self, width: int, height: int) -> list[Strip]:
        """The pane's lines for a content area of this size."""
        raise NotImplementedError

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False):
        if self._border_row is not None and self.is_mounted and not regions and not layout and not recompose:
            # A border title changed: its row, in the content's coordinates, is all that is repainted.
            top = self.content_offset
            row = self._border_row % max(self.outer_size.height, 1)
            regions = (Region(-top.x, row - top.y, self.outer_size.width, 1),)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def on_resize(self) -> None:
        self.dirty = True
        self.redraw(force=True)

    def render_line(self, y: int) -> Strip:
        return self._strips[y] if y < len(self._strips) else Strip.blank(self.content_size.width, self.rich_style)
