"""The package builds, exposes the engine's build facts, and the CLI answers."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import engine_native

PINNED_GGML = "0.20.2"


def test_ggml_version_is_the_pinned_one():
    assert engine_native.ggml_version() == PINNED_GGML


def test_system_info_describes_the_cpu_backend():
    info = engine_native.system_info()
    assert info["ggml_version"] == PINNED_GGML
    assert "CPU" in info["backends"]
    assert any(d["name"] == "CPU" for d in info["devices"])
    assert info["default_threads"] >= 1
    # Built for the native ISA: on x86-64 at least SSE3 is always reported.
    assert info["cpu_features"], "the CPU backend reported no features"


def _blas_core_in_a_new_process(**env):
    """(the engine's OpenBLAS kernels, OPENBLAS_CORETYPE after the import) in a fresh process."""
    code = ("import json, os, engine_native; "
            "print(json.dumps([engine_native.system_info()['blas_core'], os.environ.get('OPENBLAS_CORETYPE')]))")
    full = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "CBS_OPENBLAS_CORETYPE")}
    out = subprocess.run([sys.executable, "-c", code], env={**full, **env}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_engines_openblas_kernels_are_its_own_choice():
    if not engine_native.system_info()["blas"]:
        pytest.skip("built without OpenBLAS")
    # An inherited OPENBLAS_CORETYPE is back in the environment after the import; it gives way
    # to the engine's choice where the engine has one, else it applies.
    core, after = _blas_core_in_a_new_process(OPENBLAS_CORETYPE="Haswell")
    assert after == "Haswell"
    wanted = engine_native._engine_openblas_core()
    assert core.lower() == (wanted or "Haswell").lower()
    # CBS_OPENBLAS_CORETYPE steers the engine's, and leaves the environment as it was.
    assert _blas_core_in_a_new_process(CBS_OPENBLAS_CORETYPE="Haswell") == ["Haswell", None]


def _cli():
    exe = shutil.which("chatterbox-studio", path=str(Path(sys.executable).parent))
    assert exe, "the chatterbox-studio console script is not installed beside this python"
    return exe


def test_cli_version():
    from app import __version__

    out = subprocess.run([_cli(), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"chatterbox-studio {__version__}"


def test_cli_info_prints_ggml_version_and_cpu_features():
    out = subprocess.run([_cli(), "info"], capture_output=True, text=True, check=True).stdout
    assert f"ggml              {PINNED_GGML}" in out
    features = engine_native.system_info()["cpu_features"]
    assert " ".join(features) in out
    assert "default threads" in out


def test_cli_rejects_unknown_command():
    out = subprocess.run([_cli(), "no-such-command"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "invalid choice" in out.stderr


def test_layering_contracts_hold():
    """import-linter: only app imports Qt; app -> voice_lab -> engine_native; no torch."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe
    out = subprocess.run([exe], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[3])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_cli_without_arguments_opens_the_app(tmp_path):
    """No arguments: the desktop app starts (offscreen, fresh settings: the first-run model
    dialog) and keeps running until it is closed."""
    import os

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path),
           "XDG_DATA_HOME": str(tmp_path)}
    p = subprocess.Popen([_cli()], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        p.wait(timeout=15)
        raise AssertionError(f"the app exited with {p.returncode}: {p.stderr.read().decode()[-2000:]}")
    except subprocess.TimeoutExpired:
        pass
    p.terminate()
    _, err = p.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode()[-2000:]


# --- the first hour's rough edges (issue 44) ----------------------------------------------------


def _run(*args, **env):
    return subprocess.run([_cli(), *args], capture_output=True, text=True, env={**os.environ, **env})


def test_info_names_the_q4_kernel_this_cpu_runs():
    isa = engine_native.system_info()["q4_kernel_isa"]
    out = _run("info").stdout
    if isa:
        assert f"T3 Q4_0 kernel ({isa})" in out
    if engine_native.system_info()["q4_kernel"]:  # an x86 CPU with AVX2: the AVX2 form on request
        assert "T3 Q4_0 kernel (AVX2)" in _run("info", CBS_Q4_KERNEL="avx2").stdout
    assert "T3 Q4_0 kernel" not in _run("info", CBS_Q4_MATMUL="0").stdout


@pytest.fixture(scope="module")
def nano_q4():
    from tests.helpers.models import model_path

    return str(model_path("nano", "q4_0"))


@pytest.mark.parametrize("cut", [300_000, 3_000_000])  # inside the header; inside the first tensors
def test_a_truncated_model_gets_one_line_from_info_and_say(nano_q4, tmp_path, cut):
    part = tmp_path / "cut.gguf"
    with open(nano_q4, "rb") as f:
        part.write_bytes(f.read(cut))
    for args in (("info", str(part)), ("say", "Hello.", "-m", str(part), "-o", str(tmp_path / "x.wav"))):
        res = _run(*args)
        lines = res.stderr.strip().splitlines()
        print("\n" + " ".join(args[:1]), "->", res.stderr.strip())
        assert res.returncode == 1 and len(lines) == 1, res.stderr
        assert lines[0].startswith(f"chatterbox-studio: error: {part}: ") and "truncated" in lines[0]
        assert "download or convert it again" in lines[0]
        assert not any(w in lines[0] for w in ("reshape", "divisor", "out of bounds", "gguf_init"))


def test_serve_names_the_voice_folder_with_the_app_name_once(tmp_path):
    out = _run("serve", "--help", XDG_DATA_HOME=str(tmp_path)).stdout
    assert os.path.join(str(tmp_path), "chatterbox-studio", "voices") in out.replace("\n", "").replace(" ", "")
    assert "chatterbox-studio/chatterbox-studio" not in out.replace("\n", "").replace(" ", "")


def test_a_recording_given_as_voice_is_told_to_use_ref(nano_q4, tmp_path):
    import numpy as np
    import soundfile as sf

    rec = tmp_path / "recording.wav"
    sf.write(rec, np.zeros(24000, np.float32), 24000)
    res = _run("say", "Hello.", "-m", nano_q4, "--voice", str(rec), "-o", str(tmp_path / "x.wav"))
    print("\n" + res.stderr.strip())
    assert res.returncode == 1 and f"use --ref {rec}" in res.stderr and "is a recording, not a voice file" in res.stderr
    assert "model     " not in res.stderr  # told before the model loads
    other = tmp_path / "notes.txt"
    other.write_text("hello", encoding="utf-8")
    res = _run("say", "Hello.", "-m", nano_q4, "--voice", str(other), "-o", str(tmp_path / "x.wav"))
    assert res.returncode == 1 and "is not a voice file: --voice takes a .voice.gguf" in res.stderr


def test_say_best_of_says_which_embeddings_score_likeness(nano_q4, speaker_encoder, harvard, tmp_path):
    """`say --best-of` scores takes with the trained speaker encoder (app.core.speaker_identity)
    when the voice keeps its recording beside it, and says so; else names the model's own."""
    from engine_native import Engine
    from engine_native.voice import save_clip
    from tests.helpers import real_speech as rs

    x, sr = rs.read(harvard)
    voice = str(tmp_path / "harvard.voice.gguf")
    Engine(nano_q4).voice_from_audio(x, sr, name="harvard").save(voice)
    args = ("say", "Hi.", "-m", nano_q4, "--best-of", "2", "--max-tokens", "8", "-o", str(tmp_path / "x.wav"))
    res = _run(*args, "--voice", voice, CBS_SPEAKER_ENCODER=speaker_encoder.path)
    assert res.returncode == 0, res.stderr
    assert "likeness by the model's VoiceEncoder (the voice keeps no recording beside it" in res.stderr
    save_clip(voice, x, sr)
    res = _run(*args, "--voice", voice, CBS_SPEAKER_ENCODER=speaker_encoder.path)
    assert res.returncode == 0 and "best-of   2 takes a sentence, likeness by the trained" in res.stderr, res.stderr
    res = _run(*args, "--voice", voice, CBS_SPEAKER_ENCODER="/nonexistent/speaker-encoder.gguf")
    assert res.returncode == 0 and "likeness by the model's VoiceEncoder (no trained speaker encoder" in res.stderr


def test_say_with_a_decoder_speaks_through_it_and_a_missing_one_is_one_line(nano_q4, tmp_path):
    """`--decoder`: Nano's S3Gen and HiFT decode the Multilingual model's speech (the log names
    it); a decoder file that is not there is one line, before anything is spoken."""
    import soundfile as sf

    from tests.helpers.models import model_path

    mtl = str(model_path("mtl", size="small"))
    out = tmp_path / "bonjour.wav"
    res = _run("say", "Bonjour.", "-m", mtl, "--decoder", nano_q4, "--language", "fr", "--max-tokens", "30",
               "--seed", "1", "-o", str(out))
    print("\n" + res.stderr.strip())
    assert res.returncode == 0, res.stderr
    assert f"decoder   {nano_q4} (its S3Gen and HiFT, 2 CFM steps)" in res.stderr
    audio, rate = sf.read(out)
    assert rate == 24000 and audio.size > 0
    gone = tmp_path / "gone.gguf"
    res = _run("say", "Bonjour.", "-m", mtl, "--decoder", str(gone), "-o", str(tmp_path / "x.wav"))
    assert res.returncode == 1 and res.stderr.strip() == f"chatterbox-studio: error: decoder model file not found: {gone}"
    for cmd in (("say", "Bonjour.", "-m", mtl), ("serve", "-m", mtl)):  # a cluster's workers load the model alone
        res = _run(*cmd, "--decoder", nano_q4, "--cluster", "127.0.0.1:1")
        assert res.returncode == 1 and "--decoder is not offered with --cluster" in res.stderr, res.stderr
