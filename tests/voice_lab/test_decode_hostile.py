"""Hostile recordings: an HLS playlist, an ffmpeg concat list and playlists naming URLs (file:// and
http://), saved as .wav/.mp3, are refused by every way in (the Voice Lab, `lab`, `bake`, `say --ref`, and
`decode_bytes`, the server's upload decoder) without anything but the file itself being read.

Two audits, each shown catching the access on plain `ffprobe FILE` (the control):
- live canaries: the files the lists name are FIFOs, and a watcher notices the moment anything
  opens one for reading; the URL's port is a listening socket that counts connections;
- strace (where installed): every open and connect of the whole process tree; the files named,
  the port, and, for each ffmpeg/ffprobe process, any file outside the system's own folders
  but the recording's descriptor are violations.
Real recordings (an M4A with its index at the end, a WAV) go through the same audit and
decode, opening only themselves.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import audio_fixtures as af

from voice_lab import NotAudioError, RefusedRecordingError, ffmpeg_run
from voice_lab import decode as vdecode

pytestmark = pytest.mark.skipif(not af.tools_available(), reason="needs ffmpeg, ffprobe and espeak-ng")
STRACE = shutil.which("strace")
CLI = str(Path(sys.executable).parent / "chatterbox-studio")
# Where an ffmpeg process may open files besides its input: its libraries and the system's own tables.
SYSTEM_PREFIXES = ("/lib", "/usr/", "/etc/", "/proc/", "/sys/", "/dev/")


class Canaries:
    """The files and the port the hostile lists name, watched while they exist."""

    def __init__(self, root: Path):
        self.secret = root / "secret"
        self.upload = root / "upload"
        self.secret.mkdir()
        self.upload.mkdir()
        self.segment = self.secret / "other.ts"        # named by absolute path in an HLS playlist
        self.neighbour = self.upload / "neighbour.wav"  # named by a concat list beside it
        self.url_segment = self.secret / "stream.ts"    # named by a file:// URL
        for fifo in (self.segment, self.neighbour, self.url_segment):
            os.mkfifo(fifo)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.touched: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._watch_fifo, args=(f,), daemon=True)
                         for f in (self.segment, self.neighbour, self.url_segment)]
        self._threads.append(threading.Thread(target=self._watch_port, daemon=True))
        self.files = {
            "hls.wav": "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:10\n#EXT-X-MEDIA-SEQUENCE:0\n"
                       f"#EXTINF:6.0,\n{self.segment}\n#EXT-X-ENDLIST\n",
            "concat.mp3": "ffconcat version 1.0\nfile 'neighbour.wav'\n",
            "url.mp3": "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:6.0,\n"
                       f"file://{self.url_segment}\n#EXT-X-ENDLIST\n",
            # ffmpeg 5.1 already refuses http segments in a playlist read from a file (the file
            # protocol's default white list); the port still watches in case a build does not
            "http.wav": "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:6.0,\n"
                        f"http://127.0.0.1:{self.port}/seg.ts\n#EXT-X-ENDLIST\n",
        }
        for name, text in self.files.items():
            (self.upload / name).write_text(text)

    def path(self, name: str) -> str:
        return str(self.upload / name)

    def _watch_fifo(self, fifo: Path) -> None:
        while not self._stop.is_set():
            try:  # succeeds only while some process holds the FIFO open for reading
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                time.sleep(0.005)
                continue
            self.touched.append(str(fifo))
            os.close(fd)  # the reader sees the end of the file
            time.sleep(0.05)

    def _watch_port(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            self.touched.append(f"127.0.0.1:{self.port}")
            conn.close()

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        time.sleep(0.1)  # an open that came last is still seen
        self._stop.set()
        for t in self._threads:
            t.join(2)
        self.listener.close()


@pytest.fixture
def canaries(tmp_path):
    with Canaries(tmp_path) as c:
        yield c


def traced(cmd: list[str], log: Path, **kw) -> subprocess.CompletedProcess:
    """`cmd` under strace (every process it starts) when strace is installed, else as is."""
    if STRACE:
        cmd = [STRACE, "-f", "-qq", "-e", "trace=openat,open,connect,execve", "-o", str(log), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


_SYSCALL = re.compile(r"^(\d+)\s+(\w+)\((.*)")
_PATH = re.compile(r'^(?:AT_FDCWD, )?"([^"]*)"')


def audit(log: Path, c: Canaries) -> dict:
    """What the traced process tree touched: named files, the port, ffmpeg's other files."""
    found = {"named": [], "port": [], "ffmpeg_files": [], "ffmpeg_inputs": [], "ffmpeg_runs": 0}
    if not STRACE:
        return found
    ffmpeg_pids = set()
    for line in log.read_text(errors="replace").splitlines():
        m = _SYSCALL.match(line)
        if not m:
            continue
        pid, call, args = m.groups()
        if call == "execve":
            if re.match(r'"[^"]*/ff(mpeg|probe)"', args) and "= 0" in args.rsplit(")", 1)[-1]:
                ffmpeg_pids.add(pid)
                found["ffmpeg_runs"] += 1
            continue
        if call == "connect":
            if f"htons({c.port})" in args:
                found["port"].append(line)
            elif pid in ffmpeg_pids and "AF_UNIX" not in args:
                found["port"].append(line)
            continue
        p = _PATH.match(args)
        if not p:
            continue
        path = os.path.normpath("/" + p.group(1).lstrip("/")) if p.group(1).startswith("/") else p.group(1)
        if path.startswith(str(c.secret)) or os.path.basename(path) == c.neighbour.name:
            found["named"].append(line)
        if pid in ffmpeg_pids and "ENOENT" not in args:
            if re.fullmatch(r"/proc/self/fd/\d+", path):
                found["ffmpeg_inputs"].append(path)
            elif not path.startswith(SYSTEM_PREFIXES):
                found["ffmpeg_files"].append(line)
    return found


def assert_untouched(found: dict, c: Canaries) -> None:
    assert not c.touched, f"the canaries were opened: {c.touched}"
    assert not found["named"], found["named"]
    assert not found["port"], found["port"]
    assert not found["ffmpeg_files"], found["ffmpeg_files"]


# ---------------------------------------------------------------- the audits can fail


@pytest.mark.parametrize("name", ["hls.wav", "concat.mp3", "url.mp3"])
def test_plain_ffprobe_follows_each_list_and_the_audits_see_it(canaries, tmp_path, name):
    """The control: a bare `ffprobe FILE` reads what the list names, and both audits catch it."""
    log = tmp_path / "strace.log"
    traced(["ffprobe", "-v", "error", name], log, cwd=canaries.upload)
    found = audit(log, canaries)
    time.sleep(0.1)
    assert canaries.touched, "the live canary missed the access"
    if STRACE:
        assert found["named"] or found["port"], "strace missed the access"


# ---------------------------------------------------------------- refusals


def test_sniff_names_what_each_file_is(canaries):
    expect = {"hls.wav": "HLS playlist", "concat.mp3": "concat list", "url.mp3": "HLS playlist",
              "http.wav": "HLS playlist"}
    for name, kind in expect.items():
        with pytest.raises(RefusedRecordingError, match=kind):
            vdecode.probe(canaries.path(name))
        with pytest.raises(RefusedRecordingError, match=kind):
            vdecode.decode(canaries.path(name))
        with pytest.raises(RefusedRecordingError, match=kind):
            vdecode.decode_bytes((canaries.upload / name).read_bytes(), name="upload.wav")
    others = {
        "\ufeff#EXTM3U\nhttp://example.com/a.mp3\n": "playlist",
        "[playlist]\nFile1=http://example.com/a.mp3\n": "PLS playlist",
        "<?xml version='1.0'?><MPD></MPD>": "XML document",
        "v=0\no=- 0 0 IN IP4 127.0.0.1\nm=audio 5004 RTP/AVP 0\n": "SDP session",
        "https://example.com/a.mp3\n": "list of URLs",
        "file '/etc/passwd'\n": "concat list",
    }
    for text, kind in others.items():
        with pytest.raises(RefusedRecordingError, match=kind):
            vdecode.decode_bytes(text.encode(), name="x.mp3")
    assert not canaries.touched
    assert issubclass(RefusedRecordingError, NotAudioError)


@pytest.mark.parametrize("name", ["hls.wav", "concat.mp3", "url.mp3", "http.wav"])
def test_ffmpeg_itself_refuses_them_without_the_sniff(canaries, tmp_path, name):
    """The second line: handed straight to ffprobe/ffmpeg the way ffmpeg_run does (the opened
    descriptor, the white lists), each list is refused by its demuxer name and nothing is read."""
    code = ("import os, sys\n"
            "from voice_lab import ffmpeg_run\n"
            "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
            "for cmd in (ffmpeg_run.ffprobe_command(*ffmpeg_run.file_input(fd), '-show_format'),\n"
            "            ffmpeg_run.ffmpeg_command(*ffmpeg_run.file_input(fd), '-f', 'f32le', 'pipe:1')):\n"
            "    try:\n"
            "        ffmpeg_run.run(cmd, files=(fd,), timeout=60, max_output=1 << 20)\n"
            "        print('DECODED')\n"
            "    except ffmpeg_run.FfmpegFailed as e:\n"
            "        print('REFUSED', e.stderr.replace(chr(10), ' '))\n")
    log = tmp_path / "strace.log"
    r = traced([sys.executable, "-c", code, canaries.path(name)], log)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    print(lines)
    assert len(lines) == 2 and all(ln.startswith("REFUSED") and "not on whitelist" in ln for ln in lines)
    found = audit(log, canaries)
    assert_untouched(found, canaries)
    if STRACE:
        assert found["ffmpeg_runs"] == 2 and found["ffmpeg_inputs"]


@pytest.fixture(scope="module")
def nano_model():
    from tests.helpers.models import model_path

    return str(model_path("nano", "q4_0"))


@pytest.mark.parametrize("name", ["hls.wav", "concat.mp3", "url.mp3"])
@pytest.mark.parametrize("command", ["lab", "bake", "say --ref"])
def test_lab_bake_and_say_refuse_touching_nothing(canaries, tmp_path, nano_model, command, name):
    src = canaries.path(name)
    out = tmp_path / "out"
    args = {
        "lab": ["lab", src, "-o", f"{out}.wav"],
        "bake": ["bake", src, "-m", nano_model, "-o", f"{out}.voice.gguf"],
        "say --ref": ["say", "Hello.", "-m", nano_model, "--ref", src, "-o", f"{out}.wav"],
    }[command]
    log = tmp_path / "strace.log"
    r = traced([CLI, *args], log)
    print(r.stderr[-600:])
    assert r.returncode != 0
    assert "refused" in r.stderr and name in r.stderr
    assert not list(tmp_path.glob("out*")), "nothing is written for a refused recording"
    found = audit(log, canaries)
    assert_untouched(found, canaries)
    assert found["ffmpeg_runs"] == 0  # refused on its first bytes, before any ffmpeg starts


def test_voice_lab_analysis_refuses(canaries):
    """The desktop Voice Lab's analysis step (voice_lab.lab.analyse) decodes through the same function."""
    from voice_lab.lab import analyse

    for name in canaries.files:
        with pytest.raises(RefusedRecordingError):
            analyse(canaries.path(name), 10.0)
    assert not canaries.touched


# ---------------------------------------------------------------- real recordings still decode


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    d = tmp_path_factory.mktemp("speech")
    src = af.write_wav(str(d / "source.wav"), af.build_recording(str(d)))
    m4a = str(d / "interview.m4a")  # ffmpeg's default layout: the index (moov) after the audio
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-i", src, "-c:a", "aac", m4a], check=True)
    with open(m4a, "rb") as f:
        data = f.read()
    assert data.index(b"moov") > data.index(b"mdat")
    return {"wav": src, "m4a": m4a}


@pytest.mark.parametrize("kind", ["m4a", "wav"])
def test_a_real_recording_decodes_reading_only_itself(canaries, tmp_path, speech, kind):
    log = tmp_path / "strace.log"
    clip = tmp_path / "clip.wav"
    r = traced([CLI, "lab", speech[kind], "-o", str(clip), "--chain", "clean"], log)
    assert r.returncode == 0, r.stderr
    assert clip.exists()
    found = audit(log, canaries)
    assert_untouched(found, canaries)
    if STRACE:
        assert found["ffmpeg_runs"] >= 2  # probe, decode, the chain
        assert found["ffmpeg_inputs"], "ffmpeg read the recording through its descriptor"


def test_decode_bytes_reads_an_upload_from_memory(speech):
    data = Path(speech["m4a"]).read_bytes()
    x, rate, info = vdecode.decode_bytes(data, rate=24000, channels=1, name="upload.m4a")
    y, _ = vdecode.decode(speech["m4a"], rate=24000, channels=1)
    assert info.codec == "aac" and info.path == "upload.m4a" and rate == 24000
    assert np.array_equal(x, y)


# ---------------------------------------------------------------- limits


def test_output_is_capped_at_max_seconds(speech):
    full, rate = vdecode.decode(speech["wav"])
    x, _ = vdecode.decode(speech["wav"], max_seconds=2.0)
    assert x.shape[0] == 2 * rate and np.array_equal(x, full[: 2 * rate])
    x, _ = vdecode.decode(speech["m4a"], rate=16000, channels=1, max_seconds=1.5)
    assert x.shape == (24000, 1)


def test_run_stops_at_its_timeout_and_its_output_cap(tmp_path, speech):
    fifo = tmp_path / "never.wav"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # no writer ever comes: ffmpeg waits for data
    try:
        t0 = time.perf_counter()
        with pytest.raises(ffmpeg_run.FfmpegTimeout, match="longer than 1 s"):
            ffmpeg_run.run(ffmpeg_run.ffprobe_command(*ffmpeg_run.file_input(fd), "-show_format"), files=(fd,),
                           timeout=1.0, max_output=1 << 20)
        assert time.perf_counter() - t0 < 10
    finally:
        os.close(fd)
    fd = os.open(speech["wav"], os.O_RDONLY)
    try:
        with pytest.raises(ffmpeg_run.OutputTooLarge, match="more than 65,536 bytes"):
            ffmpeg_run.run(ffmpeg_run.ffmpeg_command(*ffmpeg_run.file_input(fd, "wav"), "-f", "f32le", "pipe:1"),
                           files=(fd,), timeout=60, max_output=65536)
    finally:
        os.close(fd)


def test_where_descriptors_cannot_be_passed_the_path_is_read_under_the_same_lists(canaries, speech, monkeypatch):
    """Windows has no /proc/self/fd: ffmpeg then opens the file by its path (an upload: a private
    temporary file), with the same white lists, and a list is still refused by its demuxer."""
    monkeypatch.setattr(ffmpeg_run, "PASSES_DESCRIPTORS", False)
    x, rate = vdecode.decode(speech["m4a"], rate=24000, channels=1)
    y, _, _ = vdecode.decode_bytes(Path(speech["m4a"]).read_bytes(), rate=24000, channels=1)
    assert rate == 24000 and x.shape[0] > 24000 and np.array_equal(x, y)
    for name in ("hls.wav", "concat.mp3", "url.mp3"):
        path = canaries.path(name)
        fd = os.open(path, os.O_RDONLY)
        try:
            with pytest.raises(ffmpeg_run.FfmpegFailed) as refused:
                ffmpeg_run.run(ffmpeg_run.ffprobe_command(*ffmpeg_run.file_input(fd, path=path), "-show_format"),
                               timeout=60, max_output=1 << 20)
            assert "not on whitelist" in refused.value.stderr
        finally:
            os.close(fd)
    assert not canaries.touched
