"""`chatterbox-studio watermark-model`: make perth.gguf, the Perth watermark's model the engine
marks its speech with, in the app's data folder (where the engine looks for it): pip downloads
the resemble-perth 1.0.1 wheel (MIT) into the cache folder, kept there so a second run needs no
network, and engine_native.convert.perth converts its trained weights. A wheel, an installed
`perth_net/pretrained/implicit` folder or its checkpoint may be given instead."""

from __future__ import annotations

import argparse
import os


def _cmd_watermark_model(args: argparse.Namespace) -> int:
    from app.cli.common import fail, log
    from engine_native.convert.errors import ConvertError
    from engine_native.convert.perth import FILE_NAME, convert_perth, download_wheel
    from engine_native.files import WriteFailed
    from engine_native.paths import data_dir

    out = args.output or os.path.join(data_dir(), FILE_NAME)
    if os.path.isfile(out) and not args.force:
        log(f"{out} is there already (--force makes it again)")
        return 0
    cache = args.cache or os.path.join(os.environ.get("CBS_CACHE_DIR") or os.path.expanduser("~/.cache/chatterbox-studio"),
                                       "perth")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        convert_perth(args.source or download_wheel(cache), out, log=log)
    except (ConvertError, WriteFailed, OSError) as e:
        return fail(str(e))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("watermark-model", help="fetch and convert the Perth watermark's model (perth.gguf) "
                       "into the app's data folder")
    p.add_argument("source", nargs="?", help="a resemble-perth wheel, its installed pretrained/implicit folder or "
                   "the .pth.tar (default: pip-download resemble-perth 1.0.1)")
    p.add_argument("-o", "--output", help="where to write it (default: the app's data folder, where the engine looks)")
    p.add_argument("--cache", metavar="DIR", help="where the downloaded wheel is kept "
                   "(default: ~/.cache/chatterbox-studio/perth)")
    p.add_argument("--force", action="store_true", help="convert again when the file exists")
    p.set_defaults(func=_cmd_watermark_model)
