"""Screenshots of making an audiobook, for the README: docs/screenshots/book_review.png (the review
of the real Alice EPUB: cover, metadata, chapters with the front matter unticked, one renamed)
book_render.png (the render under way: the title page done and playable, chapter I
rendering, the time left) and book_summary.png (a render's end: the summary).

Run it through scripts/screenshots.sh --book MODEL.gguf (a real X server from xvfb-run, Qt's xcb
plugin). It uses a throw-away settings file, data folder and output; MAX_TOKENS speech tokens
per sentence keep it quick on random weights.

    python scripts/screenshot_book.py --model MODEL.gguf [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from screenshots import ROOT  # noqa: E402 - scripts/, beside this file
from shot_helpers import open_window, pump  # noqa: E402

ALICE = os.path.join(ROOT, "tests", "helpers", "books", "alice.epub")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "screenshots"))
    ap.add_argument("--max-tokens", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="cbs-book-shots-")

    from PySide6.QtWidgets import QApplication

    app, w = open_window(args.model, work, (1280, 800))
    if w is None:
        return 1
    w.toolbar.preset_combo.setCurrentText("Low latency")
    w.sampling_panel.spins["max_tokens"].setValue(args.max_tokens)

    dlg = w.books.make_audiobook(ALICE)
    pump(app, 60, lambda: dlg.book is not None or dlg.error)
    if dlg.book is None:
        print(f"the book was not read: {dlg.error}", file=sys.stderr)
        return 1
    dlg.set_chapter(0, included=True)
    dlg.set_chapter(0, title="Title page")
    dlg.set_chapter(4, included=False)
    dlg.output_edit.setText(os.path.join(work, "Alice.m4b"))
    dlg.table.scrollToTop()
    pump(app, 0.5)
    dlg.grab().save(os.path.join(args.out, "book_review.png"))

    for r in range(2, dlg.table.rowCount()):             # the render: the title page and chapter I
        dlg.set_chapter(r, included=False)
    dlg.render_button.click()
    view = w.books.view
    view.resize(760, 420)
    if not pump(app, 900, lambda: 1 in view.done and view.bars[1].value() >= 120
                or view.state == "failed"):
        print("the render did not get far enough in time", file=sys.stderr)
        return 1
    pump(app, 0.3)
    view.grab().save(os.path.join(args.out, "book_render.png"))
    view.cancel()
    pump(app, 60, lambda: not w.client.busy)
    view.close()

    # the summary at the end: the title page alone, rendered again from its finished chapter
    dlg = w.books.make_audiobook(ALICE)
    pump(app, 60, lambda: dlg.book is not None)
    for r in range(dlg.table.rowCount()):
        dlg.set_chapter(r, included=r == 0)
    dlg.set_chapter(0, title="Title page")
    dlg.output_edit.setText(os.path.join(work, "Alice.m4b"))
    dlg.render_button.click()
    view = w.books.view
    view.resize(760, 420)
    if not pump(app, 300, lambda: view.state in ("done", "failed")) or view.state != "done":
        print(f"the audiobook was not written: {view.status_label.text()}", file=sys.stderr)
        return 1
    pump(app, 0.3)
    view.grab().save(os.path.join(args.out, "book_summary.png"))
    print(f"wrote {args.out}/book_review.png, book_render.png and book_summary.png")
    w.close()
    QApplication.processEvents()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
