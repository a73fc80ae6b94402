"""Errors raised by the converter; every message names the file at fault."""


class ConvertError(Exception):
    """A snapshot or model file cannot be converted (missing, truncated, unknown layout)."""
