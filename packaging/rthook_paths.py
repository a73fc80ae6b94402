# PyInstaller runtime hook: runs in the frozen app before any of our code.
# ffmpeg is not bundled on Linux (see packaging/README.md): it is looked up on PATH at run
# time. A user or a packager may still drop ffmpeg/ffprobe (ffmpeg.exe/ffprobe.exe on
# Windows) beside the executable or in an `ffmpeg/` folder there; putting those folders
# first on PATH makes voice_lab's shutil.which() find that copy before any system one.
import os
import sys

_app_dir = os.path.dirname(os.path.abspath(sys.executable))
_extra = [d for d in (os.path.join(_app_dir, "ffmpeg"), _app_dir) if os.path.isdir(d)]
os.environ["PATH"] = os.pathsep.join(_extra + [p for p in os.environ.get("PATH", "").split(os.pathsep) if p])
# Where the bundled resources (icon, .desktop entry, MIME type) are, for the GUI to find.
os.environ.setdefault("CHATTERBOX_STUDIO_RESOURCES", os.path.join(getattr(sys, "_MEIPASS", _app_dir), "resources"))
