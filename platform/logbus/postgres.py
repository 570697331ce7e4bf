"""Placeholder: filled in by the work on issue 22."""

from __future__ import annotations


def add_parsers(verbs) -> None:
    """Register this module's `logbus` verbs (none yet)."""
