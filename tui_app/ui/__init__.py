"""The Textual app: layout, keys and panes, drawn from a core session; no torch."""
