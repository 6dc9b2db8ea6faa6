"""Helpers for the notebook series "Is Speculative Decoding Worth It?". Subpackages import only those before them:
stats, engine, report, models, measure, memory, costmodel, preflight (README.md, "How it is built")."""

__version__ = "0.1.0"
