"""tokentop's measuring instruments: samplers, token timing, KV accounting, leak detection.

Importable without Textual (enforced by an import-linter contract and a test), so the
headless benchmark, the tests and any other tool can use it directly.
"""
