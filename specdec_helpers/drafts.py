"""Distilled draft models for the CPU profile (filled in by the drafts issue)."""

from __future__ import annotations

from pathlib import Path


def known_drafts() -> dict[str, dict]:
    """Draft keys shipped with the project, mapped to their manifest entries."""
    return {}


def provision_draft(key: str) -> Path:
    raise KeyError(key)
