"""The keys that change what is shown, not what runs: the pane views, the tokens' colouring,
the screens over the monitor (ledger, help, X-ray) and the session saved as JSON or SVG.
"""

from __future__ import annotations

from monitors.files import write_whole
from tui_app.core.export import export_session
from tui_app.requests import Confidence
from tui_app.ui.app_state import AppState
from tui_app.ui.screens.experts import ExpertsScreen
from tui_app.ui.screens.help import HelpScreen
from tui_app.ui.screens.ledger import LedgerScreen
from tui_app.ui.screens.xray import XrayScreen
from tui_app.ui.widgets.waterfall import Waterfall


class ViewKeys(AppState):
    def action_next_view(self) -> None:
        if why_not := self.monitor.next_view():
            self.notify(why_not)

    def action_leak_view(self) -> None:
        self.monitor.leak_view()
        self.monitor.redraw(self.running, force=True)

    def action_colouring(self) -> None:
        before = self.monitor.tokens.colouring
        colouring = self.monitor.tokens.next_colouring()
        said = f"tokens coloured: {colouring}"
        if "confidence" in (colouring, before):  # the engine measures it only while it is shown: a softmax a step
            own = self.own_engine
            if own:
                self.source.send(Confidence(on=colouring == "confidence"))
            if colouring == "confidence":
                said += " from the next token" if own else "; measured by tokentop's own engine only (a replay shows what was recorded)"
        self.notify(said)
        self.monitor.redraw(self.running, force=True)

    def action_fold(self) -> None:
        folded = self.monitor.tokens.fold()
        self.notify("thinking folded: a line a think span" if folded else "thinking shown whole")
        self.monitor.redraw(self.running, force=True)

    def action_ledger(self) -> None:
        self.push_screen(LedgerScreen(self.session))

    def action_experts(self) -> None:
        self.push_screen(ExpertsScreen(self.session, self.look.ascii))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_xray(self) -> None:
        ids = self.session.xray.run_ids()
        if not ids:
            self.notify("the X-ray shows the requests of an attached server's runs (tokentop attach URL), once one has run")
            return
        self.push_screen(XrayScreen(self.session, Waterfall(self.session, ids[-1], id="waterfall")))

    def action_save(self, kind: str) -> None:
        """The session as JSON (export) or the screen as SVG (screenshot), into the output folder."""
        from tui_app.folders import FolderError, write_stamped

        if kind == "export":
            what, ext, write, told = "the export", "json", lambda path: export_session(self.session, str(path)), "session exported to"
        else:
            what, ext, write, told = "the screenshot", "svg", lambda path: write_whole(path, self.export_screenshot()), "screenshot saved to"
        try:
            self.notify(f"{told} {write_stamped(self.out_dir, what, kind, ext, write)}")
        except FolderError as exc:
            self.notify(str(exc), severity="error", timeout=15)
