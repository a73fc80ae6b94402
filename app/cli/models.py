"""`chatterbox-studio models list|get|rm`: the app's models from the command line (the same
folder and index as the app's model manager, app.core.model_manager).

    chatterbox-studio models list                       installed, paused downloads, what can be got
    chatterbox-studio models get turbo --quant q4_0     download (Ctrl-C pauses; run again to resume),
                                                        verify, convert; also a snapshot FOLDER
    chatterbox-studio models rm chatterbox-turbo-q4_0   delete a model (or --paused KEY: a paused download)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from app.cli.common import fail, log


def _manager(args):
    from app.core.model_manager import ModelManager
    from app.core.paths import models_dir

    return ModelManager(args.dir or models_dir())


def _cmd_list(args) -> int:
    from app.core.model_manager import CATALOGUE, size_text

    manager = _manager(args)
    models, pending = manager.installed(), manager.pending()
    print(f"Installed in {manager.models_dir}:")
    if not models:
        print("  (none: `chatterbox-studio models get turbo` downloads one)")
    width = max([len(os.path.basename(m.file)) for m in models] + [10])
    for m in models:
        print(f"  {os.path.basename(m.file):<{width}}  {m.name:<24} {m.quant:<5} {size_text(m.size):>8}  "
              f"{m.languages_text():<13} {m.source_text()}")
    if pending:
        print("Paused downloads (`models get KEY` resumes, `models rm --paused KEY` discards):")
        for p in pending:
            print(f"  {p.key:<6} {p.name:<24} {p.quant:<5} {size_text(p.have)} of {size_text(p.total)}  "
                  f"({p.repo} @ {p.revision[:10]})")
    print("Available from Hugging Face (`models get KEY [--quant q4_0|q8_0|f16|f32]`):")
    installed = {m.variant for m in models}
    for e in CATALOGUE.values():
        mark = "  installed" if e.variant in installed else ""
        print(f"  {e.key:<6} {e.name:<24} {e.languages:<13} {e.repo}{mark}")
    return 0


class _Meter:
    """Progress on stderr: one line rewritten in place on a terminal, a line per stage elsewhere."""

    def __init__(self):
        self.tty = sys.stderr.isatty()
        self.last_stage, self.last_t, self.width = None, 0.0, 0

    def __call__(self, p) -> None:
        now = time.monotonic()
        if p.stage == self.last_stage and now - self.last_t < (0.2 if self.tty else 10.0) and p.stage != "done":
            return
        self.last_t = now
        text = p.text()
        if self.tty:
            sys.stderr.write("\r" + text.ljust(self.width))
            self.width = len(text)
            if p.stage == "done":
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif p.stage != self.last_stage or p.stage in ("downloading", "converting"):
            log(text)
        self.last_stage = p.stage

    def end_line(self) -> None:
        if self.tty and self.width:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.width = 0


def _cmd_get(args) -> int:
    from app.core.hub import HubError
    from app.core.model_manager import CATALOGUE, ManagerError, size_text

    manager = _manager(args)
    meter = _Meter()
    folder = os.path.isdir(args.what)
    if not folder and args.what not in CATALOGUE:
        return fail(f"give one of {', '.join(CATALOGUE)} or a snapshot folder; got {args.what!r}")
    try:
        if folder:
            model = manager.convert_folder(args.what, args.quant, progress=meter)
        else:
            model = manager.get(args.what, args.quant, progress=meter, keep_download=args.keep_download,
                                force=args.force)
    except KeyboardInterrupt:
        meter.end_line()
        kept = next((p for p in manager.pending() if p.key == args.what), None)
        if kept is not None:
            log(f"paused: {size_text(kept.have)} of {size_text(kept.total)} kept; the same command resumes")
        else:
            log("stopped")
        return 130
    except (ManagerError, HubError) as e:
        meter.end_line()
        return fail(str(e))
    meter.end_line()
    print(f"{model.file}  ({model.name} {model.quant}, {size_text(model.size)}, {model.source_text()})")
    return 0


def _cmd_rm(args) -> int:
    from app.core.model_manager import CATALOGUE, ManagerError

    manager = _manager(args)
    if args.paused:
        if args.what not in CATALOGUE or not any(p.key == args.what for p in manager.pending()):
            return fail(f"no paused download of {args.what!r}")
        manager.discard(args.what)
        log(f"discarded the paused download of {CATALOGUE[args.what].name}")
        return 0
    models = manager.installed()
    found = [m for m in models if args.what in (m.file, os.path.basename(m.file), os.path.basename(m.file)[:-5])]
    if not found and args.what in CATALOGUE:
        found = [m for m in models if m.variant == CATALOGUE[args.what].variant]
    if not found:
        names = ", ".join(os.path.basename(m.file) for m in models) or "none"
        return fail(f"no installed model {args.what!r} (installed: {names})")
    if len(found) > 1:
        return fail(f"{args.what!r} names {len(found)} models ({', '.join(os.path.basename(m.file) for m in found)}); "
                    "give the file name")
    try:
        manager.remove(found[0].file)
    except ManagerError as e:
        return fail(str(e))
    log(f"deleted {found[0].file}")
    return 0


def add_parser(sub) -> None:
    from app.core.model_manager import QUANTS

    p = sub.add_parser("models", help="the app's models: list them, get one from Hugging Face, delete one",
                       description="The models the app uses, in its models folder: list, get (download from "
                       "Hugging Face with resume and checksum checks, then convert), rm. Honours HF_ENDPOINT, "
                       "HF_HOME, HF_TOKEN and HF_HUB_OFFLINE.")
    p.add_argument("--dir", metavar="DIR", help="the models folder (default: the app's)")
    msub = p.add_subparsers(dest="models_command", metavar="list|get|rm", required=True)
    q = msub.add_parser("list", help="installed models, paused downloads, and the models to get")
    q.set_defaults(func=_cmd_list)
    q = msub.add_parser("get", help="download (or resume) and convert a model: turbo, mtl, nano; or convert "
                        "a snapshot FOLDER")
    q.add_argument("what", metavar="KEY|FOLDER")
    q.add_argument("--quant", default="q4_0", choices=QUANTS, help="precision of the model file (default q4_0)")
    q.add_argument("--keep-download", action="store_true", help="keep the downloaded weights after converting")
    q.add_argument("--force", action="store_true", help="download and convert again even if installed")
    q.set_defaults(func=_cmd_get)
    q = msub.add_parser("rm", help="delete an installed model (file name or KEY), or a paused download")
    q.add_argument("what", metavar="NAME|KEY")
    q.add_argument("--paused", action="store_true", help="discard the paused download of KEY")
    q.set_defaults(func=_cmd_rm)
    for q in msub.choices.values():
        q.add_argument("--dir", metavar="DIR", default=argparse.SUPPRESS, help="the models folder (default: the app's)")
