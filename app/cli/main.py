"""The `chatterbox-studio` command: no arguments opens the app, a subcommand is the CLI."""

from __future__ import annotations

import argparse
import os
import sys

from app import __version__


def _fail(message: str) -> int:
    print(f"chatterbox-studio: error: {message}", file=sys.stderr)
    return 1


def _cmd_info(args: argparse.Namespace) -> int:
    if args.model:
        return _model_info(args.model)
    import engine_native

    try:
        info = engine_native.system_info()
    except engine_native.EngineError as e:  # the backend modules could not be loaded
        return _fail(str(e))
    print(f"chatterbox-studio {__version__}")
    print(f"ggml              {info['ggml_version']}")
    print(f"backends          {', '.join(info['backends']) or '(none)'} (from {info['backend_dir']})")
    for i, dev in enumerate(info["devices"]):
        mem = (f", {dev['memory_free'] / 2**30:.1f} of {dev['memory_total'] / 2**30:.1f} GiB free"
               if dev["memory_total"] else "")
        auto = " (auto)" if i == 0 else ""
        print(f"device            {dev['id']:<10} {dev['backend']} {dev['type']}: {dev['description']}{mem}{auto}")
    print(f"cpu variant       {info['cpu_variant'] or '(one variant built)'}")
    print(f"cpu features      {' '.join(info['cpu_features']) or '(none)'}")
    blas = f"OpenBLAS f32 products ({info['blas_core']} kernels)" if info.get("blas_core") else "OpenBLAS f32 products"
    q4_isa = info.get("q4_kernel_isa") or ""
    kernels = [name for name, on in ((blas, info.get("blas")),
                                     (f"T3 Q4_0 kernel ({q4_isa})", info.get("q4_kernel") and q4_isa),
                                     ("AMX products for quantised models", info.get("amx")),
                                     (f"S3Gen Q4_0 products in int16 ({info.get('int16_products')})", info.get("int16_products")))
               if on]
    print(f"cpu kernels       {', '.join(kernels) or '(ggml only)'}")
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
    languages = meta.get("chatterbox.tokenizer.languages")
    if languages:  # Multilingual: the codes `say --language` takes
        from engine_native.language import NAMES

        print(f"languages         {len(languages)}: " + ", ".join(f"{c} ({NAMES.get(c, c)})" for c in languages))
    from engine_native.bake import baked_voice_info

    baked = baked_voice_info(meta)
    if baked:
        source = baked.get("source_file") or "unknown source"
        print(f"built-in voice    {baked.get('name', '?')} (baked from {source}"
              f"{', sha256 ' + str(baked['source_sha256'])[:12] if baked.get('source_sha256') else ''}"
              f"{', ' + str(baked['baked_at']) if baked.get('baked_at') else ''})")
    else:
        print("built-in voice    the model's own")
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from engine_native.convert import ConvertError, convert, download_and_convert
    from engine_native.files import WriteFailed

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
    except WriteFailed as e:
        return _fail(str(e))
    return 0


def _cmd_requantize(args: argparse.Namespace) -> int:
    from engine_native.convert import ConvertError, requantize

    try:
        requantize(args.model, args.output, args.quant)
    except ConvertError as e:
        return _fail(str(e))
    return 0


def _cmd_lab(args: argparse.Namespace) -> int:
    if args.bake:
        missing = [flag for flag, v in (("-m/--model", args.model), ("--name", args.name)) if not v]
        if missing:
            return _fail(f"--bake needs {' and '.join(missing)}")
        if not os.path.isfile(args.model):
            return _fail(f"model file not found: {args.model}")
        if not args.voice_output and not args.output.endswith(".wav"):
            return _fail("--bake writes NAME.voice.gguf beside the clip; give a .wav clip or --voice-output")
    from voice_lab import VoiceLabError
    from voice_lab.lab import prepare_clip, write_outputs

    from engine_native import EngineError

    from app.cli.common import load_engine
    from app.core.speaker_identity import NOT_CHECKED, speaker_embedder

    try:  # the trained encoder (--speaker-encoder, else setup's), else the model's x-vectors
        embedder = speaker_embedder(args.speaker_encoder, lambda: load_engine(args) if args.model else None)
    except EngineError as e:  # a missing or wrong encoder file or model: the message names it
        return _fail(str(e))
    encoder = embedder.description if embedder else None
    try:
        result = prepare_clip(args.input, target=args.target, chain=args.chain,
                              embed=embedder.embed if embedder else None,
                              speaker=None if args.speaker is None else args.speaker - 1)
        if "speakers" in result.report:
            result.report["speakers"]["encoder"] = encoder
        report_path = write_outputs(result, args.output, args.report)
    except VoiceLabError as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"cannot write {e.filename or args.output}: {e.strerror}")
    r = result.report
    w, lo = r["window"], r["loudness"]
    spans = ", ".join(f"{a:.2f}-{b:.2f} s" for a, b in w["spans"])
    print(f"source    {r['source']['codec']} {r['source']['sample_rate']} Hz x{r['source']['channels']}, "
          f"{r['source']['duration']:.2f} s, {r['analysis']['speech_seconds']:.2f} s of speech")
    sp = r.get("speakers")
    if sp is None:
        print(f"speakers  not analysed: {NOT_CHECKED} (give --speaker-encoder FILE, as scripts/setup.sh makes, "
              "or -m MODEL)")
    else:
        print(f"speakers  told apart by {encoder}")
        for s in sp["speakers"]:
            where = ", ".join(f"{a:.2f}-{b:.2f}" for a, b in s["spans"])
            print(f"speaker   {s['speaker']}: {s['seconds']:.1f} s ({where})" + ("  <- window" if s["speaker"] == sp["chosen"]
                                                                             and sp["count"] > 1 else ""))
        print(f"speakers  {sp['count']} found (separation {sp['separation']})")
    print(f"window    {w['method']}: {spans}")
    print(f"chain     {r['chain']['name']} ({r['chain_reason']})")
    print(f"loudness  {lo['before']['integrated_lufs']} -> {lo['after']['integrated_lufs']} LUFS, "
          f"true peak {lo['before']['true_peak_dbtp']} -> {lo['after']['true_peak_dbtp']} dBTP")
    print(f"wrote     {args.output} ({result.duration:.2f} s, 24 kHz mono float32) and {report_path}")
    if args.bake:
        return _bake_clip(args, result)
    return 0


def _bake_clip(args: argparse.Namespace, result) -> int:
    """The lab's clip -> a voice, with the lab's report (source, spans, chain) in its metadata."""
    import json

    from app.cli.common import load_engine
    from engine_native import EngineError

    out = args.voice_output or args.output[: -len(".wav")] + ".voice.gguf"
    try:
        engine = load_engine(args)
        voice = engine.voice_from_audio(result.samples, result.rate, name=args.name,
                                        source_file=os.path.basename(args.input),
                                        source_sha256=result.report["source"].get("sha256"),
                                        lab_chain=json.dumps(result.report["chain"]),
                                        lab_spans=json.dumps(result.report["window"]["spans"]))
        voice.save(out)
    except EngineError as e:
        return _fail(str(e))
    print(f"baked     {out} (voice '{voice.name}', {os.path.getsize(out) / 1024:.0f} KiB)")
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

    from app.cli.speak import add_parsers as add_speech_parsers

    add_speech_parsers(sub)
    from app.cli.revoice import add_parser as add_revoice_parser

    add_revoice_parser(sub)
    from app.cli.bench import add_parser as add_bench_parser

    add_bench_parser(sub)
    from app.cli.book import add_parser as add_book_parser

    add_book_parser(sub)
    from app.cli.serve import add_parser as add_serve_parser

    add_serve_parser(sub)
    from app.cli.detect import add_parser as add_detect_parser

    add_detect_parser(sub)
    from app.cli.watermark_model import add_parser as add_watermark_model_parser

    add_watermark_model_parser(sub)
    from app.cli.models import add_parser as add_models_parser

    add_models_parser(sub)

    p = sub.add_parser("lab", help="prepare a recording for voice cloning: find the speech, "
                       "pick a window, clean it, write a 24 kHz mono clip")
    p.add_argument("input", help="any audio (or video) file ffmpeg can read")
    p.add_argument("-o", "--output", required=True, help="the clip .wav to write (24 kHz mono float32)")
    p.add_argument("--target", type=float, default=10.0, metavar="SEC",
                   help="clip length in seconds (default 10; never below the cloning minimum)")
    p.add_argument("--chain", default="auto", metavar="auto|clean|lossy|FILE.json",
                   help="filter chain: chosen from codec and bitrate (auto), a preset, or a chain file")
    p.add_argument("--report", metavar="FILE.json", help="where to write the report (default CLIP.lab.json)")
    p.add_argument("--bake", action="store_true", help="also bake a voice from the clip (needs -m and --name)")
    p.add_argument("-m", "--model", help="the model .gguf: bakes, and tells speakers apart when no --speaker-encoder")
    p.add_argument("--speaker-encoder", metavar="FILE.gguf",
                   help="a speaker-encoder GGUF (engine_native.convert.ge2e; scripts/setup.sh makes one) to tell "
                        "speakers apart (default: the one setup made, where it is)")
    p.add_argument("--speaker", type=int, default=None, metavar="N",
                   help="clone speaker N (1: the most speech, the default) when the recording has several")
    p.add_argument("--name", help="the voice's name")
    p.add_argument("--voice-output", metavar="V.voice.gguf", help="where --bake writes (default: beside the clip)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for --bake (default: all cores)")
    from app.cli.common import add_device_argument

    add_device_argument(p)
    p.set_defaults(func=_cmd_lab)

    from app.cli.selftest import add_parser as add_selftest_parser  # the packaged app's self-test (packaging/)

    add_selftest_parser(sub)
    return parser


def _open_gui(files: list[str]) -> int:
    from app.qt.gui import run  # Qt is imported only when the window opens

    return run(files=files)


def main(argv: list[str] | None = None) -> int:
    from app.core.paths import migrate_legacy_data_dir

    argv = sys.argv[1:] if argv is None else argv
    migrate_legacy_data_dir()  # an earlier version's doubled data folder, moved once
    # No arguments, or only files (the desktop entry's %F: models, voices, recordings, scripts): the app.
    if not argv or all(os.path.isfile(a) for a in argv):
        return _open_gui(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
