"""Every ffmpeg and ffprobe process this program starts, started one way.

A recording is untrusted input: ffmpeg's demuxers can make it name other files or URLs
(an HLS playlist or a concat list saved as `interview.wav` makes a naive `ffmpeg -i` read
the files it names, or fetch URLs). So a file is never handed to ffmpeg by its path:

- we open it ourselves and pass the open descriptor; ffmpeg reads `/proc/self/fd/N`
  (`file_input`; `/dev/fd/N` on macOS), so the file it decodes is the one we opened, whatever
  its name says (Windows cannot pass descriptors: there ffmpeg opens the path, under the same
  white lists);
- `-protocol_whitelist file`: no network protocol (http, tcp, udp, rtp, ...) can be opened;
- `-format_whitelist`: only the demuxers of ordinary audio and video containers
  (`RECORDING_DEMUXERS`), none of which opens another file. Playlists (hls, dash), concat
  lists, image sequences, SDP/RTSP, IMF and subtitle demuxers are refused, in nested
  contexts too (ffmpeg copies the white lists into them). The decode step forces the
  demuxer the probe found and allows only that one; `-enable_drefs 0` keeps QuickTime
  files from following their external data references;
- probing reads at most `PROBE_BYTES` / `PROBE_MICROSECONDS`; every process has a timeout
  and a cap on its output (`run`).

Reading the recording from a pipe (protocol `pipe` only) would be stricter still, but a
pipe cannot seek: an MP4/M4A with its index at the end (ffmpeg's own default layout) does
not decode from one ("partial file"), and WAV, MP3, Ogg and AAC lose
their duration and Opus its bitrate, which the Voice Lab's chain choice needs (measured with
ffmpeg 5.1). Our own raw PCM does go through a pipe (`pcm_input`), with the raw demuxer
forced and protocol `pipe` only.

`voice_lab.decode` sniffs the first bytes as well, to refuse playlists and lists with a
message that says what the file is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

from voice_lab.errors import FfmpegMissingError, VoiceLabError

#: Demuxers a recording may use: audio and audio/video containers that never open another
#: file or the network. Names as ffmpeg lists them (`ffmpeg -demuxers`); "mov" covers
#: mp4/m4a/3gp, "matroska" covers webm.
RECORDING_DEMUXERS = (
    "aac", "ac3", "aiff", "amr", "amrnb", "amrwb", "ape", "asf", "au", "avi", "caf", "dsf", "dts",
    "dtshd", "eac3", "flac", "flv", "gsm", "ircam", "loas", "matroska", "mlp", "mov", "mp3", "mpc",
    "mpc8", "mpeg", "mpegts", "nistsphere", "ogg", "qcp", "shn", "sox", "tak", "truehd", "tta", "voc",
    "w64", "wav", "wv", "xwma",
)
PROBE_BYTES = 5_000_000         # ffmpeg's default probesize, stated so it stays bounded
PROBE_MICROSECONDS = 5_000_000  # analyzeduration
STDERR_KEEP = 65_536            # the tail of ffmpeg's messages kept for an error


class FfmpegFailed(VoiceLabError):
    """ffmpeg or ffprobe exited with an error; `stderr` holds the tail of its messages."""

    def __init__(self, message: str, stderr: str = "", returncode: int | None = None):
        super().__init__(message)
        self.stderr, self.returncode = stderr, returncode


class FfmpegTimeout(FfmpegFailed):
    """The process ran past its time limit and was killed."""


class OutputTooLarge(FfmpegFailed):
    """The process wrote more than its cap and was killed."""


def _which(name: str) -> str | None:
    """Indirection so tests can pretend a tool is missing."""
    return shutil.which(name)


def ffmpeg_path() -> str | None:
    return _which("ffmpeg")


def ffprobe_path() -> str | None:
    return _which("ffprobe")


def available() -> bool:
    return ffmpeg_path() is not None and ffprobe_path() is not None


def _program(name: str) -> str:
    path = _which(name)
    if path is None:
        raise FfmpegMissingError(f"{name} is not installed (install ffmpeg, e.g. `apt install ffmpeg`)")
    return path


def _fd_folder() -> str | None:
    for folder in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(folder):
            return folder
    return None


#: Whether ffmpeg can be handed an open descriptor (Linux, macOS); elsewhere (Windows) it
#: opens the file by its path, under the same white lists.
PASSES_DESCRIPTORS = os.name == "posix" and _fd_folder() is not None
#: Flags for opening a file we hand to ffmpeg (binary on Windows; not inherited but by pass_fds).
OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


def fd_path(fd: int) -> str:
    """How the child names an inherited descriptor (pass_fds keeps its number)."""
    return f"{_fd_folder()}/{fd}"


def file_input(fd: int, demuxer: str | None = None, path: str | None = None) -> list[str]:
    """Input options for a file we opened (descriptor `fd`, passed with `run(files=...)`).
    `demuxer` forces that demuxer and allows it alone; None lets ffmpeg probe among
    RECORDING_DEMUXERS. `path` names the same file where descriptors cannot be passed."""
    allowed = demuxer or ",".join(RECORDING_DEMUXERS)
    args = ["-protocol_whitelist", "file", "-format_whitelist", allowed,
            "-probesize", str(PROBE_BYTES), "-analyzeduration", str(PROBE_MICROSECONDS)]
    if demuxer:
        args += ["-f", demuxer]
    if demuxer in (None, "mov"):  # ffmpeg (not ffprobe) refuses a private option its demuxer lacks
        args += ["-enable_drefs", "0"]
    if PASSES_DESCRIPTORS:
        source = fd_path(fd)
    elif path is not None:
        source = "file:" + os.path.abspath(path)
    else:
        raise VoiceLabError("this system cannot hand an open file to ffmpeg, and the file has no path")
    return args + ["-i", source]


def pcm_input(sample_format: str, rate: int, channels: int) -> list[str]:
    """Input options for raw PCM this program writes into the process's stdin."""
    return ["-protocol_whitelist", "pipe", "-f", sample_format, "-ar", str(int(rate)), "-ac", str(int(channels)),
            "-i", "pipe:0"]


def ffmpeg_command(*args: str, loglevel: str = "error") -> list[str]:
    """ffmpeg with our global options (no keyboard on stdin, no progress, errors only unless
    `loglevel` says otherwise) and `args`."""
    return [_program("ffmpeg"), "-nostdin", "-nostats", "-hide_banner", "-loglevel", loglevel, *args]


def ffprobe_command(*args: str) -> list[str]:
    return [_program("ffprobe"), "-hide_banner", "-loglevel", "error", *args]


def spawn(args: list[str]) -> subprocess.Popen:
    """A long-running ffmpeg fed and read by the caller (the server's streaming encoders):
    stdin, stdout and stderr are pipes, unbuffered. `args` as for `ffmpeg_command`."""
    return subprocess.Popen(ffmpeg_command(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)


def run(command: list[str], *, timeout: float, max_output: int, files: tuple[int, ...] = (),
        stdin: bytes | None = None, what: str = "ffmpeg") -> tuple[bytes, str]:
    """Run `command` (from ffmpeg_command/ffprobe_command) to the end: (stdout, stderr text).

    `files`: descriptors the child inherits (see file_input); `stdin`: bytes written to it
    (else it reads nothing). Killed after `timeout` seconds (FfmpegTimeout) or once stdout
    passes `max_output` bytes (OutputTooLarge); a non-zero exit is FfmpegFailed."""
    try:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                pass_fds=tuple(files) if PASSES_DESCRIPTORS else ())
    except OSError as e:
        raise FfmpegMissingError(f"{what} could not be started: {e}") from None
    err_tail = bytearray()
    timed_out = threading.Event()

    def read_stderr() -> None:
        for line in iter(lambda: proc.stderr.read(4096), b""):
            err_tail.extend(line)
            del err_tail[:-STDERR_KEEP]

    def feed() -> None:
        try:
            proc.stdin.write(stdin)
        except (BrokenPipeError, OSError, ValueError):
            pass  # ffmpeg stopped reading (it failed, or it was killed): its exit status tells
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    def expire() -> None:
        if proc.poll() is None:
            timed_out.set()
            proc.kill()

    helpers = [threading.Thread(target=read_stderr, daemon=True)]
    if stdin is not None:
        helpers.append(threading.Thread(target=feed, daemon=True))
    for t in helpers:
        t.start()
    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    out = bytearray()
    too_large = False
    try:
        while True:
            block = proc.stdout.read(1 << 20)
            if not block:
                break
            out += block
            if len(out) > max_output:
                too_large = True
                proc.kill()
                break
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for t in helpers:
            t.join(5)
        proc.stdout.close()
        proc.stderr.close()
    err = err_tail.decode("utf-8", "replace").strip()
    if timed_out.is_set():
        raise FfmpegTimeout(f"{what} took longer than {timeout:g} s and was stopped", err, proc.returncode)
    if too_large:
        raise OutputTooLarge(f"{what} produced more than {max_output:,} bytes and was stopped", err,
                             proc.returncode)
    if proc.returncode != 0:
        raise FfmpegFailed(f"{what} failed (exit {proc.returncode}): {last_line(err)}", err, proc.returncode)
    return bytes(out), err


def last_line(stderr: str) -> str:
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "unknown error"
