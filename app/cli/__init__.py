"""The command line: say, live, bake, lab, bench, convert, info, selftest (Qt only for the window)."""

from app.cli.main import main

__all__ = ["main"]
