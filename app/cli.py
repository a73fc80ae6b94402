"""The `chatterbox-studio` command: no arguments opens the app, a subcommand is the CLI."""

from __future__ import annotations

import argparse
import sys

from app import __version__


def _fail(message: str) -> int:
    print(f"chatterbox-studio: error: {message}", file=sys.stderr)
    return 1


def _cmd_info(args: argparse.Namespace) -> int:
    if args.model:
        return _model_info(args.model)
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


def _model_info(path: str) -> int:
    from engine_native.convert import ConvertError, inspect_model

    try:
        m = inspect_model(path)
    except ConvertError as e:
        return _fail(str(e))
    print(f"model             {m['path']}")
    print(f"variant           {m['variant']}")
    print(f"quantisation      {m['quant']}")
    print(f"file size         {m['file_bytes'] / 2**20:.1f} MiB")
    print(f"tensors           {m['n_tensors']} ({', '.join(f'{n} {t}' for t, n in sorted(m['types'].items()))})")
    for comp, c in sorted(m["components"].items()):
        print(f"  {comp:<15} {c['tensors']:>5} tensors {c['params'] / 1e6:>9.2f} M params {c['bytes'] / 2**20:>9.1f} MiB")
    meta = m["metadata"]
    for key in ("t3.n_layer", "t3.n_embd", "t3.n_head", "t3.text_vocab", "t3.speech_vocab",
                "s3gen.cfm.meanflow", "s3gen.cfm.n_timesteps", "s3gen.silence_token"):
        print(f"  {key:<28} {meta.get('chatterbox.' + key)}")
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from engine_native.convert import ConvertError, convert, download_and_convert

    try:
        if args.download:
            if args.snapshot:
                return _fail("give either a snapshot folder or --download REPO, not both")
            download_and_convert(args.download, args.output, quant=args.quant, variant=args.variant)
        elif args.snapshot:
            convert(args.snapshot, args.output, quant=args.quant, variant=args.variant)
        else:
            return _fail("give a snapshot folder or --download REPO")
    except ConvertError as e:
        return _fail(str(e))
    return 0


def _cmd_requantize(args: argparse.Namespace) -> int:
    from engine_native.convert import ConvertError, requantize

    try:
        requantize(args.model, args.output, args.quant)
    except ConvertError as e:
        return _fail(str(e))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chatterbox-studio",
        description="Zero-shot voice cloning and speech synthesis on a native ggml engine. "
        "Run without arguments to open the desktop app.",
    )
    parser.add_argument("--version", action="version", version=f"chatterbox-studio {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    quants = ["f32", "f16", "q8_0", "q5_0", "q4_0"]
    p = sub.add_parser("info", help="show the engine build (versions, CPU features, backends), or a model file")
    p.add_argument("model", nargs="?", help="a model .gguf to describe")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("convert", help="convert a Chatterbox Hugging Face snapshot into one GGUF model")
    p.add_argument("snapshot", nargs="?", help="snapshot folder (t3_*.safetensors, s3gen_meanflow.safetensors, ...)")
    p.add_argument("--download", metavar="REPO", help="download REPO (e.g. ResembleAI/chatterbox-turbo) first")
    p.add_argument("-o", "--output", required=True, help="the .gguf file to write")
    p.add_argument("--variant", default="auto", choices=["auto", "turbo", "nano"])
    p.add_argument("--quant", default="f32", choices=quants)
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser("requantize", help="re-store a model under another quantisation")
    p.add_argument("model", help="the .gguf model to read")
    p.add_argument("-o", "--output", required=True, help="the .gguf file to write")
    p.add_argument("--quant", required=True, choices=quants)
    p.set_defaults(func=_cmd_requantize)
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
