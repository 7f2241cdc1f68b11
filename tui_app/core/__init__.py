"""The app's state and language, with no Textual, Rich or torch: the fold of events into a session,
its readings, the event sources, options, the tour, formats and the braille renderer."""
