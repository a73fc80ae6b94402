"""Chatterbox Studio front ends: the PySide6 desktop app and the command line.

Only this package imports Qt, and only lazily, so the command line runs without it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("chatterbox-studio")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
