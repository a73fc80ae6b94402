"""A screenshot of the script editor for the README: docs/screenshots/script_editor.png.

The real window under xvfb-run (Qt's xcb plugin), a throw-away settings file and data folder:
a script with a cast (`Name:` lines mapped to library voices), expression tags and a timed
pause, two takes in the history with their likeness scores, and the Cast dialog open.

    xvfb-run -a -s "-screen 0 1600x1000x24 -dpi 96" .venv/bin/python scripts/screenshot_script.py \\
        --model MODEL.gguf [--out docs/screenshots]

The library voices are stand-ins (the model's own voice saved under each name) unless the
model can clone; the point is the editor, not the voices.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from shot_helpers import pump, throwaway_window  # noqa: E402 - scripts/, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


SCRIPT = ("# Chapter one\n\n"
          "Narrator: The rain had not stopped for three days. [pause 1s]\n"
          "Maya: You came back. [laugh] I honestly did not think you would.\n"
          "Tom: [sigh] Neither did I. But the lighthouse needed a keeper.\n\n"
          "Maya: Then come in, before the storm finds you too.")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "screenshots"))
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="cbs-shot-script-")

    from PySide6.QtWidgets import QApplication

    from app.qt.script_panels import save_cast

    app, w = throwaway_window(work)
    w.script.lexicon_path = os.path.join(work, "lexicon.json")
    w.move(0, 0)
    w.show()
    loaded = []
    w.client.modelChanged.connect(loaded.append)
    w.load_model(args.model)
    if not pump(app, 300, lambda: loaded) or not loaded[-1]:
        print(f"the model did not load: {w.last_error}", file=sys.stderr)
        return 1
    os.makedirs(w.store.folder, exist_ok=True)
    cast = {}
    for name in ("Narrator", "Maya", "Tom"):
        path = os.path.join(w.store.folder, f"{name}.voice.gguf")
        done = []
        w.client.submit(lambda wk, _j, p=path, n=name: wk.engine.builtin_voice.save(p, n), success=done.append)
        pump(app, 60, lambda d=done: d)
        cast[name] = path
    w.library.reload(select=cast["Narrator"])  # read in the background; the voice picker follows
    pump(app, 60, lambda: not w.library.busy)
    save_cast(settings, SCRIPT, cast)
    w.controller.stream_options = {"first_chunk_tokens": 50, "chunk_tokens": 50}
    w.toolbar.preset_combo.setCurrentText("Low latency")
    w.sampling_panel.spins["max_tokens"].setValue(args.max_tokens)
    w.toolbar.sampling_button.setChecked(False)
    w.sampling_panel.seed_random.setChecked(False)   # a seed the small test model speaks with
    w.sampling_panel.seed_spin.setValue(args.seed)
    # takes for the history (short lines the small random-weight test model speaks with these seeds)
    for seed, text in ((3, "Hello there."), (7, "Hello there.")):
        w.sampling_panel.seed_spin.setValue(seed)
        w.editor.set_text(text)
        w.editor.request_play()
        pump(app, 900, lambda: w.controller.state == "idle" and not w.client.busy)
    w.editor.set_text(SCRIPT)
    pump(app, 60, lambda: all(t.likeness is not None for t in
                               (w.editor.history.item(i).data(0x0100) for i in range(w.editor.history.count()))))
    w.controller.stop()
    w.editor.tags.menu.setFocus()
    dlg = w.script.edit_cast()
    pump(app, 0.5)
    g = w.frameGeometry()
    dlg.move(g.x() + g.width() - dlg.width() - 60, g.y() + 150)
    pump(app, 0.5)
    shot = app.primaryScreen().grabWindow(0, g.x(), g.y(), g.width(), g.height())
    shot.save(os.path.join(args.out, "script_editor.png"))
    print(f"wrote {args.out}/script_editor.png")
    dlg.reject()
    w.close()
    QApplication.processEvents()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
