"""One app per user (and data folder): a second launch hands its files to the running window
and exits, the way a double-click on a second file should behave.

    if hand_off(files):            # a running app took them (and came to the front)
        return 0
    server = InstanceServer(window.open_files)   # this app now answers later launches

A local socket (QLocalServer: a Unix socket, a named pipe on Windows) named after the data
folder, so two apps with different data folders (a test's, a second profile) do not meet.
The message is one JSON line {"files": [absolute paths]}; the running app answers "ok".
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from app.core.paths import app_data_dir

CONNECT_MS = 500
REPLY_MS = 3000


def instance_name(data_dir: str | None = None) -> str:
    key = f"{getpass.getuser()}:{os.path.abspath(data_dir or app_data_dir())}"
    return "chatterbox-studio-" + hashlib.sha1(key.encode()).hexdigest()[:16]


def hand_off(files, name: str | None = None) -> bool:
    """Sends the files (possibly none: the running window comes to the front) to a running app;
    True when one took them, False when none is running (start one)."""
    sock = QLocalSocket()
    sock.connectToServer(name or instance_name())
    if not sock.waitForConnected(CONNECT_MS):
        return False
    sock.write((json.dumps({"files": [os.path.abspath(f) for f in files]}) + "\n").encode())
    sock.waitForBytesWritten(REPLY_MS)  # False when flushed already: what counts is the answer
    reply = b""
    while b"\n" not in reply and sock.waitForReadyRead(REPLY_MS):
        reply += bytes(sock.readAll().data())
    sock.disconnectFromServer()
    return reply.startswith(b"ok")


class InstanceServer(QObject):
    """Listens for later launches; `filesReceived(list)` on the GUI thread for each."""

    filesReceived = Signal(list)

    def __init__(self, on_files=None, name: str | None = None, parent=None):
        super().__init__(parent)
        self.name = name or instance_name()
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.UserAccessOption)
        if not self.server.listen(self.name):
            QLocalServer.removeServer(self.name)  # a socket left by an app that crashed
            self.server.listen(self.name)
        self.server.newConnection.connect(self._accept)
        if on_files is not None:
            self.filesReceived.connect(on_files)

    @property
    def listening(self) -> bool:
        return self.server.isListening()

    def _accept(self) -> None:
        while self.server.hasPendingConnections():
            sock = self.server.nextPendingConnection()
            buf = bytearray()

            def read(sock=sock, buf=buf) -> None:
                buf.extend(bytes(sock.readAll().data()))
                if b"\n" not in buf:
                    return
                line = bytes(buf).split(b"\n", 1)[0]
                try:
                    files = [str(f) for f in json.loads(line.decode("utf-8")).get("files", [])]
                except (ValueError, AttributeError):
                    sock.disconnectFromServer()
                    return
                sock.write(b"ok\n")
                sock.flush()
                sock.disconnected.connect(sock.deleteLater)
                self.filesReceived.emit(files)

            sock.readyRead.connect(read)

    def close(self) -> None:
        self.server.close()
