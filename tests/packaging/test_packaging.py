"""The double-click app: icon and desktop files, the PyInstaller build, its smoke test, the per-user install.

SLOW TESTS (the `@slow` ones): one PyInstaller build (~1.5-2 min on 2 cores) shared by
the module, the frozen app's smoke test (~30 s: main window offscreen, self-test WAV with
a random Nano Q4_0) and an install/uninstall round trip into a temporary HOME. About 3 min
in all, so they run in CI; locally CBS_SKIP_PACKAGING=1 skips them.
The cheap checks of resources/ at the top always run.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RESOURCES = ROOT / "resources"
PACKAGING = ROOT / "packaging"
SIZES = (16, 32, 48, 64, 128, 256, 512)


def slow(test):
    """The frozen-app tests: minutes, not seconds; CBS_SKIP_PACKAGING=1 skips them locally (CI runs them)."""
    test = pytest.mark.timeout(1500)(test)
    return pytest.mark.skipif(os.environ.get("CBS_SKIP_PACKAGING") == "1", reason="CBS_SKIP_PACKAGING=1")(test)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


# --- resources (fast) -------------------------------------------------------------


def test_icon_pngs_exist_at_every_size_and_match_the_svg(tmp_path):
    for size in SIZES:
        assert png_size(RESOURCES / "icons" / f"chatterbox-studio-{size}.png") == (size, size)
    # The committed PNGs are what the SVG renders to now (re-run render_icons.py after editing it).
    import importlib.util

    from PySide6.QtGui import QImage
    from PySide6.QtWidgets import QApplication

    # A full QApplication (not render()'s QGuiApplication), so later widget tests still get one.
    _app = QApplication.instance() or QApplication([])  # noqa: F841
    spec = importlib.util.spec_from_file_location("render_icons", RESOURCES / "render_icons.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.render(RESOURCES / "chatterbox-studio.svg", tmp_path)

    def pixels(p):
        img = QImage(str(p)).convertToFormat(QImage.Format.Format_RGBA8888)
        return np.frombuffer(bytes(img.constBits()), np.uint8).reshape(img.height(), img.width(), 4).astype(int)

    for size in (16, 64, 256):
        a = pixels(RESOURCES / "icons" / f"chatterbox-studio-{size}.png")
        b = pixels(tmp_path / f"chatterbox-studio-{size}.png")
        diff = np.abs(a - b).mean()
        print(f"icon {size}px: mean abs diff {diff:.3f} / 255")
        assert diff < 2.0
        assert a[..., 3].max() == 255 and a[0, 0, 3] == 0  # opaque mark, transparent corner


def test_desktop_entry_declares_the_app_its_icon_and_file_types():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(RESOURCES / "chatterbox-studio.desktop")
    d = entry["Desktop Entry"]
    assert d["Type"] == "Application" and d["Name"] == "Chatterbox Studio"
    assert d["Exec"].split()[0] == "chatterbox-studio" and "%F" in d["Exec"]
    assert d["Icon"] == "chatterbox-studio"
    mimes = [m for m in d["MimeType"].split(";") if m]
    # what `chatterbox-studio FILE` opens (app.core.open_files): voices, models, recordings, scripts
    assert mimes == ["application/x-chatterbox-voice", "application/x-gguf", "audio/*", "video/*", "text/plain",
                     "text/markdown", "text/html", "application/epub+zip"]
    if shutil.which("desktop-file-validate"):
        res = subprocess.run(["desktop-file-validate", str(RESOURCES / "chatterbox-studio.desktop")],
                             capture_output=True, text=True)
        assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


def test_mime_types_tell_voices_from_models():
    ns = {"m": "http://www.freedesktop.org/standards/shared-mime-info"}
    root = ET.parse(RESOURCES / "chatterbox-studio-mime.xml").getroot()
    voice, gguf = root.findall("m:mime-type", ns)
    assert voice.get("type") == "application/x-chatterbox-voice"
    assert [g.get("pattern") for g in voice.findall("m:glob", ns)] == ["*.voice.gguf"]
    assert gguf.get("type") == "application/x-gguf"
    assert [g.get("pattern") for g in gguf.findall("m:glob", ns)] == ["*.gguf"]
    if shutil.which("update-mime-database"):  # the desktop's own database, built from our file
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "packages").mkdir()
            shutil.copy(RESOURCES / "chatterbox-studio-mime.xml", Path(d) / "packages")
            res = subprocess.run(["update-mime-database", d], capture_output=True, text=True)
            assert res.returncode == 0, res.stderr
            globs = (Path(d) / "globs2").read_text()
            assert "60:application/x-chatterbox-voice:*.voice.gguf" in globs
            assert "50:application/x-gguf:*.gguf" in globs


def test_the_wheel_carries_the_resources_where_the_app_finds_them(tmp_path):
    """The wheel's Python part (scikit-build-core with wheel.cmake=false: no native build),
    unpacked: app/resources holds the icon, desktop entry and MIME types, and the app's icon
    lookup (app.core.paths) finds them there, away from the source tree. app.core.paths imports
    engine_native (the data folder is defined once there), whose compiled part this wheel lacks:
    the installed distribution's is used, as from a source checkout."""
    import zipfile

    pytest.importorskip("scikit_build_core")
    out = tmp_path / "wheel"
    res = subprocess.run([sys.executable, "-c", "import sys\nfrom scikit_build_core.build import build_wheel\n"
                          "print(build_wheel(sys.argv[1], {'wheel.cmake': 'false', 'build-dir': sys.argv[2]}))",
                          str(out), str(tmp_path / "build")], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    wheel = out / res.stdout.strip().splitlines()[-1]
    names = zipfile.ZipFile(wheel).namelist()
    for f in ("app/resources/chatterbox-studio.svg", "app/resources/chatterbox-studio.desktop",
              "app/resources/chatterbox-studio-mime.xml", *(f"app/resources/icons/chatterbox-studio-{s}.png"
                                                            for s in SIZES)):
        assert f in names, f
    assert "app/resources/render_icons.py" not in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site, [n for n in names if ".dist-info/" not in n])  # the installed one's
    env = {k: v for k, v in os.environ.items() if k != "CHATTERBOX_STUDIO_RESOURCES"}
    env["PYTHONPATH"] = str(site)
    res = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1])\n"
                          "from app.core.paths import app_icon; print(app_icon())", str(site)],
                         cwd=tmp_path, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(site / "app" / "resources" / "chatterbox-studio.svg")


# --- the frozen app (slow) ------------------------------------------------------------


@pytest.fixture(scope="module")
def built_app(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    res = subprocess.run(["bash", str(PACKAGING / "build.sh"), "--dist", str(dist)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("build.sh: built"))
    print(line)
    m = re.search(r"in (\d+) s: (\S+) in (\d+) files", line)
    assert m, line
    app = dist / "chatterbox-studio"
    assert (app / "chatterbox-studio").is_file()
    # The engine comes from the installed package, compiled; Qt brings both platform plugins.
    internal = app / "_internal"
    assert list((internal / "engine_native").glob("_core*.so"))
    # ggml's backend modules travel with it, every one the installed engine was built with
    # (the CPU in each x86-64 variant; CUDA/Vulkan where the build machine made them).
    import engine_native

    installed = {p.name for p in Path(engine_native.system_info()["backend_dir"]).glob("libggml*.so")}
    frozen = {p.name for p in (internal / "engine_native").glob("libggml*.so")}
    assert any(n.startswith("libggml-cpu") for n in frozen), frozen
    assert installed <= frozen, installed - frozen
    # OpenBLAS (scipy-openblas32) where the engine links it, in the folder _core's rpath names.
    if engine_native.system_info()["blas"]:
        assert list((internal / "scipy_openblas32" / "lib").glob("libscipy_openblas*.so"))
    for plugin in ("libqoffscreen.so", "libqxcb.so"):
        assert (internal / "PySide6" / "Qt" / "plugins" / "platforms" / plugin).is_file(), plugin
    assert (internal / "resources" / "chatterbox-studio.svg").is_file()
    return app


@slow
def test_frozen_app_opens_its_window_and_its_selftest_writes_a_playable_wav(built_app, tmp_path):
    import soundfile as sf

    from tests.helpers.models import model_path

    model = model_path("nano", "q4_0")
    res = subprocess.run(["bash", str(PACKAGING / "smoke_test.sh"), "--app", str(built_app),
                          "--model", str(model), "--keep", str(tmp_path)], capture_output=True, text=True)
    print(res.stdout)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert "frozen app" in res.stdout  # the self-test ran inside the PyInstaller build, not this Python
    w, h = png_size(tmp_path / "window.png")
    assert w >= 400 and h >= 300, (w, h)
    audio, rate = sf.read(tmp_path / "smoke.wav", dtype="float32")
    assert rate == 24000 and audio.size > 0 and np.abs(audio).max() > 0


@slow
def test_install_then_uninstall_leaves_home_as_it_was(built_app, tmp_path):
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    user_mimeapps = "[Default Applications]\ntext/plain=gedit.desktop\n"
    (home / ".config" / "mimeapps.list").write_text(user_mimeapps)
    before = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")} | {"HOME": str(home)}

    res = subprocess.run(["bash", str(PACKAGING / "install-linux.sh"), "--app", str(built_app)],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    share = home / ".local" / "share"
    launcher = home / ".local" / "bin" / "chatterbox-studio"
    desktop = (share / "applications" / "chatterbox-studio.desktop").read_text()
    app_exe = home / ".local" / "lib" / "chatterbox-studio" / "chatterbox-studio"
    assert f"Exec={app_exe} %F" in desktop
    for size in SIZES:
        assert png_size(share / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "chatterbox-studio.png") == (size, size)
    assert (share / "icons" / "hicolor" / "scalable" / "apps" / "chatterbox-studio.svg").is_file()
    assert (share / "mime" / "packages" / "chatterbox-studio.xml").is_file()
    if shutil.which("update-mime-database"):
        assert "application/x-chatterbox-voice:*.voice.gguf" in (share / "mime" / "globs2").read_text()
    mimeapps = (home / ".config" / "mimeapps.list").read_text()
    assert "application/x-chatterbox-voice=chatterbox-studio.desktop" in mimeapps
    assert "text/plain=gedit.desktop" in mimeapps
    # The installed launcher (a symlink into the app folder) runs the frozen app.
    out = subprocess.run([str(launcher), "--version"], capture_output=True, text=True,
                         env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("chatterbox-studio "), out.stdout + out.stderr

    res = subprocess.run(["bash", str(PACKAGING / "uninstall-linux.sh")], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    after = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert after == before
    assert (home / ".config" / "mimeapps.list").read_text() == user_mimeapps
