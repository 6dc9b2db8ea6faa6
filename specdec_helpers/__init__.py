"""Helpers for the notebook series "Is Speculative Decoding Worth It?".

Subpackages by responsibility, each importing only those before it: stats, engine, report, models, measure,
memory, costmodel, preflight; setup_check and demo serve notebooks 00 and demo. What each holds: README.md
("How it is built"). The series runner, reference builder, demo page and preflight CLI are in ``tools/``; the
draft distillation is in ``recipes/distill_drafts/``.
"""

__version__ = "0.1.0"
