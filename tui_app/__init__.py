"""tokentop: watch an LLM generate, live."""

__version__ = "0.1.0"
