"""Errors raised while fetching and checking models."""

from __future__ import annotations


class PullError(Exception):
    """A model could not be found, downloaded, verified or stored."""


class ConversionError(PullError):
    """A checkpoint could not be converted to GGUF (unsupported layout or contents)."""
