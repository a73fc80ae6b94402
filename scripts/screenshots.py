"""Screenshots of the real app for the README: docs/screenshots/main_window.png and voice_lab.png.

Run it through scripts/screenshots.sh (a real X server from xvfb-run, Qt's xcb plugin). It uses a
throw-away settings file and data folder, loads MODEL, clones a few voices from espeak-ng
recordings (when the engine can clone), plays a short script and grabs the window while a
sentence is being spoken, then opens the Voice Lab on a recording and grabs that.

    python scripts/screenshots.py --model MODEL.gguf [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

from shot_helpers import open_window, pump  # noqa: E402 - scripts/, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = ("The lighthouse keeper climbed the spiral stairs one last time. Below him, the harbour lights "
          "flickered on, one by one, like a town slowly waking from a dream.\n\n"
          "He had counted these steps for thirty years. Tonight, for the first time, he lost count.")
VOICES = [("Harbour Narrator", "en-gb", 140), ("Morgan", "en-us", 165), ("Riley", "en-gb-x-rp", 175)]
LINES = ["the quick brown fox jumps over the lazy dog and keeps on running far away",
         "she sells sea shells by the sea shore while the gulls circle overhead",
         "a journey of a thousand miles begins with one small step forward today",
         "every voice has a colour of its own that listeners recognise at once"]


def recording(folder: str, voice: str, speed: int) -> str:
    """~11 s of espeak-ng speech with pauses and a little noise (44.1 kHz stereo FLAC)."""
    import soundfile as sf

    parts = []
    for i, line in enumerate(LINES):
        wav = os.path.join(folder, f"{voice}-{i}.wav")
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", wav, line], check=True, capture_output=True)
        x, sr = sf.read(wav, dtype="float32")
        parts += [np.zeros(int(0.9 * sr) if i in (0, 2) else int(0.25 * sr), np.float32), x * 0.8]
    x = np.concatenate(parts + [np.zeros(int(0.6 * sr), np.float32)])
    x = x + np.random.default_rng(0).normal(0, 10 ** (-58 / 20), x.size).astype(np.float32)
    path = os.path.join(folder, f"{voice}-interview.flac")
    sf.write(path, np.stack([x, x * 0.96], axis=1), sr)
    return path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "screenshots"))
    ap.add_argument("--max-tokens", type=int, default=60)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="cbs-shots-")

    from PySide6.QtWidgets import QApplication

    app, w = open_window(args.model, work, (1360, 820))
    if w is None:
        return 1

    # a few voices in the library (needs native cloning)
    recs = [(name, recording(work, voice, speed)) for name, voice, speed in VOICES]
    for name, path in recs:
        op = w.open_voice_lab(path)
        pump(app, 120, lambda: not op.running)
        w.lab.name_edit.setText(name)
        w.lab.clone()
        pump(app, 600, lambda: w.lab.session.busy == "" and (w.lab.session.voice is not None
                                                              or "failed" in w.lab.clone_status.text()))
        if w.lab.session.voice is None:
            print(f"cloning is not available: {w.lab.clone_status.text()}", file=sys.stderr)
            break
        w.lab.save_to_library()
        pump(app, 60, lambda: w.lab.session.busy == "" and not w.library.busy)
    w.show_studio()
    w.library.select("")

    # a short take, then the script; grab while the second sentence is being heard
    c = w.controller
    c.stream_options = {"first_chunk_tokens": 50, "chunk_tokens": 50}  # few chunks: quicker on slow machines
    w.toolbar.preset_combo.setCurrentText("Low latency")
    w.sampling_panel.spins["max_tokens"].setValue(args.max_tokens)
    w.toolbar.sampling_button.setChecked(False)
    w.editor.set_text("Testing, one two three.")
    w.editor.request_play()
    pump(app, 600, lambda: c.state == "idle")
    w.toolbar.preset_combo.setCurrentText("Quality")
    w.editor.set_text(SCRIPT)
    w.editor.request_play()
    pump(app, 1800, lambda: c.state == "idle")
    if w.takes.current is None or w.takes.current.frames == 0:
        print(f"no audio: {w.last_error}", file=sys.stderr)
        return 1
    take = w.takes.current
    c.replay(take)
    second = take.sentence_ranges()[1][0] / take.sample_rate if len(take.sentences) > 1 else 0.2
    pump(app, second + 0.6)
    c.timer.stop()
    w.transport.status.setText(f"Sentence 2 of {len(take.sentences)}")
    app.processEvents()
    w.grab().save(os.path.join(args.out, "main_window.png"))
    c.stop()

    # the Voice Lab on a low-bitrate MP3 of the first recording: Voice Lab picks the repair chain
    mp3 = os.path.join(work, "voice-memo.mp3")
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", recs[0][1], "-c:a", "libmp3lame",
                    "-b:a", "64k", mp3], check=True)
    op = w.open_voice_lab(mp3)
    pump(app, 120, lambda: not op.running)
    w.lab.name_edit.setText("Harbour Narrator")
    w.lab.ensure_clip(lambda _c: None)
    pump(app, 120, lambda: w.lab.session.busy == "")
    steps = [st.kind for st in w.lab.chain_editor.chain.steps]
    w.lab.chain_editor.list.setCurrentRow(steps.index("loudnorm") if "loudnorm" in steps else 0)
    pump(app, 0.3)
    w.lab.chain_editor.list.scrollToItem(w.lab.chain_editor.list.currentItem())
    app.processEvents()
    w.grab().save(os.path.join(args.out, "voice_lab.png"))
    print(f"wrote {args.out}/main_window.png and voice_lab.png")
    w.close()
    QApplication.processEvents()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
