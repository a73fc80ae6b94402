"""The `chatterbox-studio` command: no arguments opens the app, a subcommand is the CLI."""

from __future__ import annotations

import argparse
import sys

from app import __version__


def _cmd_info(args: argparse.Namespace) -> int:
    import engine_native

    info = engine_native.system_info()
    print(f"chatterbox-studio {__version__}")
    print(f"ggml              {info['ggml_version']}")
    print(f"backends          {', '.join(info['backends']) or '(none)'}")
    for dev in info["devices"]:
        print(f"device            {dev['name']}: {dev['description']}")
    print(f"cpu features      {' '.join(info['cpu_features']) or '(none)'}")
    print(f"default threads   {info['default_threads']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chatterbox-studio",
        description="Zero-shot voice cloning and speech synthesis on a native ggml engine. "
        "Run without arguments to open the desktop app.",
    )
    parser.add_argument("--version", action="version", version=f"chatterbox-studio {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("info", help="show the engine build: versions, CPU features, backends")
    p.set_defaults(func=_cmd_info)
    return parser


def _open_gui() -> int:
    try:
        from app.gui import run  # noqa: PLC0415  (Qt is imported only when the GUI opens)
    except ImportError:
        print(
            "chatterbox-studio: the desktop app is not part of this build yet; "
            "run `chatterbox-studio --help` for the command line.",
            file=sys.stderr,
        )
        return 2
    return run()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        return _open_gui()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
