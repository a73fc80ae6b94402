"""A new user's first hour, played on the real app against a Hugging Face Hub stand-in, with
screenshots for the README: docs/screenshots/welcome.png and model_manager.png (and tour.png).

The stand-in (tests/helpers/hub_server.py, on 127.0.0.1, HF_ENDPOINT pointed at it) publishes
the random-weight Nano and Turbo snapshots (tests/reference: ~/.cache/chatterbox-studio/
snapshots) under their Hugging Face names. With a throw-away home (settings, data, HF_HOME),
the app starts as on a fresh machine: the welcome dialog; "Download a model…" opens the model
manager, Nano is downloaded, paused, the app closed and opened again (a restart), the download
resumed, verified, converted and loaded; the tour shows once; a sentence is spoken. Last, a
Turbo download on a slower "network" is grabbed in progress for the README.

    scripts/screenshots.sh --first-hour [OUT_DIR]     (under Xvfb; or QT_QPA_PLATFORM=offscreen)
    python scripts/first_hour.py [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from shot_helpers import pump  # noqa: E402 - scripts/, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # tests.helpers (the stand-in); the app itself as installed (or from the venv's sources)


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)



def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "screenshots"))
    ap.add_argument("--pause-at", type=float, default=0.4, help="pause the download at this share")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    home = tempfile.mkdtemp(prefix="cbs-first-hour-")
    for var, sub in (("XDG_DATA_HOME", "data"), ("XDG_CONFIG_HOME", "config"), ("HF_HOME", "hf")):
        os.environ[var] = os.path.join(home, sub)
    os.environ.pop("HF_HUB_OFFLINE", None)
    # what scripts/setup.sh leaves on a fresh machine beside the app: the watermark's model in the
    # data folder (the engine marks its speech by default and needs it to load a model)
    from engine_native.paths import data_dir
    from engine_native.watermark import MODEL_FILE
    from tests.helpers.models import watermark_model_path

    os.makedirs(data_dir(), exist_ok=True)
    shutil.copyfile(watermark_model_path(), os.path.join(data_dir(), MODEL_FILE))

    from tests.helpers.hub_server import HubServer
    from tests.reference.cache import snapshot_dir

    log("the Hub stand-in: hashing the snapshots it publishes")
    hub = HubServer({"ResembleAI/chatterbox-nano": snapshot_dir("nano"),
                     "ResembleAI/chatterbox-turbo": snapshot_dir("turbo")}).__enter__()
    os.environ["HF_ENDPOINT"] = hub.url
    log(f"HF_ENDPOINT={hub.url}; home {home}")

    from app.core.paths import app_data_dir
    from app.qt.gui import create_main_window, make_app, user_settings

    app = make_app([sys.argv[0]])

    def new_window():
        w = create_main_window(user_settings())
        w.tour_enabled = True
        w.resize(1280, 800)
        w.show()
        pump(app, 1.0)
        return w

    # --- the first start: the welcome dialog --------------------------------------------------------
    w = new_window()
    welcome = w.choose_model(first_run=True)
    pump(app, 1.0)
    welcome.grab().save(os.path.join(args.out, "welcome.png"))
    log(f"welcome dialog: '{welcome.windowTitle()}', options: "
        + ", ".join(b.text().strip() for b in (welcome.download_button, welcome.open_button, welcome.convert_button)))

    # --- "Download a model…": the manager; Nano at q4_0, paused part-way -------------------------------
    welcome.download_button.click()
    mgr = w.models.manager_dialog
    pump(app, 1.0, lambda: mgr is not None and mgr.isVisible())
    t0 = time.monotonic()
    mgr.get("nano", "q4_0")
    pump(app, 600, lambda: mgr.progress.value() >= 1000 * args.pause_at and "Downloading" in mgr.detail.text())
    log(f"downloading: {mgr.detail.text()}")
    mgr.pause_button.click()
    pump(app, 60, lambda: mgr.resume_button.isVisible())
    log(f"paused after {time.monotonic() - t0:.1f} s: {mgr.progress_title.text()} | {mgr.detail.text()}")

    # --- a restart: the app closed and opened again; the manager resumes ------------------------------
    w.close()
    pump(app, 2.0)
    log("the app closed; opened again")
    w = new_window()
    w.toolbar.model_button.click()
    mgr = w.models.manager_dialog
    pump(app, 30, lambda: mgr.resume_button.isVisible())
    log(f"the manager after the restart: {mgr.progress_title.text()} | {mgr.detail.text()}")
    before = len(hub.gets("t3_nano_v1.safetensors")) + len(hub.gets("s3gen_meanflow.safetensors"))
    loaded = []
    w.client.modelChanged.connect(loaded.append)
    t1 = time.monotonic()
    mgr.resume_button.click()
    stages = set()
    pump(app, 1800, lambda: (stages.add(mgr.detail.text().split(" ")[0]) or False) or (loaded and loaded[-1]))
    ranges = [r for n in ("t3_nano_v1.safetensors", "s3gen_meanflow.safetensors") for r in hub.gets(n)]
    log(f"resumed with {ranges[before:]}; stages seen: {sorted(s for s in stages if s)}")
    if not (loaded and loaded[-1]):
        log(f"FAILED: the model did not load: {mgr.message.text()} {w.last_error}")
        return 1
    log(f"model loaded {time.monotonic() - t1:.1f} s after Resume: {w.models.status_label.text()}")
    log(f"models folder: {sorted(os.listdir(os.path.join(app_data_dir(), 'models')))}")

    # --- the tour, once ---------------------------------------------------------------------------
    from app.qt.tour import Tour

    pump(app, 10, lambda: w.findChild(Tour) is not None and w.findChild(Tour).isVisible())
    tour = w.findChild(Tour)
    if tour is None:
        log("FAILED: no tour after the first model")
        return 1
    tour.grab().save(os.path.join(args.out, "tour.png"))
    log(f"tour shown: '{tour.windowTitle()}'; remembered as shown (never again): {w.settings.tour_shown}")
    tour.ok_button.click()
    mgr.hide()

    # --- used: a sentence spoken ------------------------------------------------------------------
    c = w.controller
    w.sampling_panel.spins["max_tokens"].setValue(40)
    w.editor.set_text("Hello from the first hour.")
    w.editor.request_play()
    pump(app, 600, lambda: c.state == "idle" and w.takes.current is not None)
    take = w.takes.current
    if take is None or take.frames == 0:
        log(f"FAILED: no take: {w.last_error}")
        return 1
    log(f"spoken: a take of {take.frames / take.sample_rate:.2f} s in the Takes list "
        f"({w.editor.history.count()} take)")

    # --- the manager for the README: Nano installed, Turbo coming in over a slower network ----------
    hub.rate_limit = 40e6
    w.toolbar.model_button.click()
    mgr = w.models.manager_dialog
    mgr.get("turbo", "q4_0")
    pump(app, 120, lambda: "left" in mgr.detail.text() and mgr.progress.value() > 120)
    pump(app, 1.5)
    mgr.grab().save(os.path.join(args.out, "model_manager.png"))
    log(f"manager: installed {[mgr.table.topLevelItem(i).text(0) for i in range(mgr.table.topLevelItemCount())]}; "
        f"{mgr.progress_title.text()}: {mgr.detail.text()}")
    mgr.pause_button.click()
    pump(app, 60, lambda: mgr.resume_button.isVisible())
    w.close()
    pump(app, 1.0)
    hub.__exit__()
    log(f"wrote {args.out}/welcome.png, model_manager.png, tour.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
