"""One app per user and data folder (app.qt.single_instance): a second `chatterbox-studio FILE...`
(a real process, as a double-click starts it) hands its files to the running app and exits at
once; with no app running there is nobody to hand them to."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("pytestqt")

from app.qt.single_instance import InstanceServer, hand_off, instance_name  # noqa: E402


# A launch's side, in a process of its own (as it always is: in one process the reply would wait
# for this thread's event loop, which the waiting sender holds).
HAND_OFF = ("import sys\nfrom PySide6.QtCore import QCoreApplication\napp = QCoreApplication([])\n"
            "from app.qt.single_instance import hand_off\nprint(hand_off(sys.argv[2:], name=sys.argv[1]))\n")


def test_a_second_launch_hands_its_files_to_the_running_app(qtbot, tmp_path):
    data_home = tmp_path / "data"
    name = instance_name(str(data_home / "chatterbox-studio"))  # the app's data folder under XDG_DATA_HOME
    received = []
    server = InstanceServer(received.extend, name=name)
    assert server.listening
    (tmp_path / "a.voice.gguf").write_bytes(b"GGUF")
    (tmp_path / "notes.md").write_text("# Hi\n", encoding="utf-8")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_DATA_HOME": str(data_home),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    t0 = time.monotonic()
    second = subprocess.Popen([sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())",
                               "a.voice.gguf", "notes.md"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    qtbot.waitUntil(lambda: second.poll() is not None, timeout=60000)  # our event loop answers it meanwhile
    out, err = second.communicate()
    print(f"\nthe second launch exited {second.returncode} after {time.monotonic() - t0:.1f} s")
    assert second.returncode == 0, err.decode()[-2000:]
    assert received == [str(tmp_path / "a.voice.gguf"), str(tmp_path / "notes.md")]  # absolute paths
    server.close()


def test_without_a_running_app_nobody_takes_the_files(qapp, tmp_path):
    assert hand_off([str(tmp_path / "x.wav")], name=instance_name(str(tmp_path / "nobody"))) is False


def test_a_socket_left_by_a_crashed_app_is_taken_over(qtbot, tmp_path):
    name = instance_name(str(tmp_path / "crashed"))
    if sys.platform != "win32":  # a stale Unix socket file, as a killed app leaves it
        import socket
        import tempfile

        path = os.path.join(tempfile.gettempdir(), name)
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.close()
        assert os.path.exists(path)
    got = []
    server = InstanceServer(got.extend, name=name)
    assert server.listening
    launch = subprocess.Popen([sys.executable, "-c", HAND_OFF, name, str(tmp_path / "y.wav")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    qtbot.waitUntil(lambda: launch.poll() is not None, timeout=30000)
    out, err = launch.communicate()
    assert out.decode().strip() == "True", err.decode()[-1000:]
    assert got == [str(tmp_path / "y.wav")]
    server.close()
