"""Helpers for the notebook series "Is Speculative Decoding Worth It?".

Subpackages, each importing only those before it: stats, engine, report, models, measure, memory, costmodel,
preflight; setup_check and demo serve notebooks 00 and demo (README.md, "How it is built").
"""

__version__ = "0.1.0"
