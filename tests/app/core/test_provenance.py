"""Provenance tags (app/core/provenance.py) in every format a take exports to
(app.core.take.export_audio), read back by ffprobe: the app and its version, the model (file,
variant, quantisation), the voice, "watermark: perth" when the audio is marked; never the text."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from app import __version__
from app.core.provenance import Provenance, voice_names
from app.core.take import Take, export_audio

pytestmark = pytest.mark.skipif(shutil.which("ffprobe") is None, reason="needs ffprobe")

TAGS = Provenance("chatterbox-turbo-q4_0.gguf", "turbo", "q4_0", ("Narrator; the second",), watermarked=True)


def ffprobe_tags(path) -> dict:
    """Every tag ffprobe shows for the file (the container's and the stream's), keys lower-cased."""
    r = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags:stream_tags", "-of", "json",
                        str(path)], capture_output=True, text=True, check=True)
    info = json.loads(r.stdout)
    tags = dict(info.get("format", {}).get("tags", {}))
    for s in info.get("streams", []):
        tags.update(s.get("tags", {}))
    return {k.lower(): v for k, v in tags.items()}


def test_the_comment_line():
    assert TAGS.comment == (f"Chatterbox Studio {__version__}; model: chatterbox-turbo-q4_0.gguf (turbo, q4_0); "
                            "voice: Narrator, the second; watermark: perth")
    plain = Provenance("m.gguf", "nano", "f32", ("A", "B", "A"))
    assert plain.comment.endswith("voice: A, B") and "watermark" not in plain.comment


def test_voice_names():
    class V:
        name = "Alice"

    assert voice_names({None: None, "Alice": V()}, builtin="Built-in (Nano)") == ["Built-in (Nano)", "Alice"]
    assert voice_names(None) == ["Built-in"]


@pytest.mark.parametrize("ext", ["wav", "flac", "ogg", "mp3"])
def test_every_export_format_carries_the_tags(tmp_path, ext):
    if ext == "mp3" and shutil.which("ffmpeg") is None:
        pytest.skip("MP3 export needs ffmpeg")
    take = Take("The secret words of the script.", "Narrator")
    take.add_audio(0, take.text, (0, 31), (0.1 * np.sin(np.arange(12000) / 9)).astype(np.float32))
    out = tmp_path / f"take.{ext}"
    export_audio(take.samples, take.sample_rate, str(out), TAGS)
    tags = ffprobe_tags(out)
    print(ext, tags)
    assert tags["comment"] == TAGS.comment
    assert any(v.startswith(f"Chatterbox Studio {__version__}") for k, v in tags.items()
               if k in ("encoder", "software", "encoded_by"))
    assert "secret" not in json.dumps(tags)
    export_audio(take.samples, take.sample_rate, str(out), Provenance("m.gguf", "nano", "f32", ("V",)))
    assert "watermark" not in ffprobe_tags(out)["comment"]
