"""Converter building blocks against the PyTorch reference environment.

* ``engine_native.convert.filterbanks``: the three mel matrices vs librosa /
  torchaudio.compliance.kaldi computed in the reference venv.
* ``engine_native.convert.torch_pickle``: ``.pt`` files written by ``torch.save`` in
  the reference venv, read back without torch; unsafe / broken files refused.

The reference venv is ``.venv-ref`` (or ``$CBS_REF_PYTHON``); it is required (CI has
it), so its absence fails these tests instead of skipping them.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from engine_native.convert import filterbanks, torch_pickle
from tests.reference import refenv

ROOT = Path(__file__).resolve().parents[3]


def _ref_python() -> str:
    return str(refenv.ensure_ref_python())  # the oracle's venv; CI always has it


def _run_ref(script: str, *args: str) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([_ref_python(), "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          env=env, timeout=600, cwd="/")
    assert proc.returncode == 0, f"reference script failed:\n{proc.stdout}\n{proc.stderr}"


# ------------------------------------------------------------------------------------------
# filterbanks
# ------------------------------------------------------------------------------------------

_FB_REF = """
import sys, numpy as np, torch, librosa
from torchaudio.compliance import kaldi
from chatterbox.models.voice_encoder.config import VoiceEncConfig
from chatterbox.models.voice_encoder.melspec import mel_basis
# chatterbox/models/s3gen/utils/mel.py: librosa_mel_fn(sr=sampling_rate, n_fft=n_fft, n_mels=num_mels, fmin=fmin, fmax=fmax)
m24 = librosa.filters.mel(sr=24000, n_fft=1920, n_mels=80, fmin=0, fmax=8000)
ve = mel_basis(VoiceEncConfig())
b, _ = kaldi.get_mel_banks(80, 512, 16000.0, 20.0, 0.0, 100.0, -500.0, 1.0)
k = torch.nn.functional.pad(b, (0, 1), mode="constant", value=0).numpy()
bin_mels = kaldi.mel_scale(16000.0 / 512 * torch.arange(256.0)).numpy()
hp = VoiceEncConfig()
ve_hp = dict(sample_rate=hp.sample_rate, n_fft=hp.n_fft, hop=hp.hop_size, win=hp.win_size, n_mels=hp.num_mels,
             fmin=hp.fmin, fmax=hp.fmax, preemphasis=hp.preemphasis, mel_power=hp.mel_power,
             partial_frames=hp.ve_partial_frames, stft_magnitude_min=hp.stft_magnitude_min)
np.savez(sys.argv[1], mel24=m24, ve=ve, kaldi=k, kaldi_bin_mels=bin_mels,
         ve_hp_keys=np.array(list(ve_hp)), ve_hp_vals=np.array([float(v) for v in ve_hp.values()]))
"""


@pytest.fixture(scope="module")
def fb_ref(tmp_path_factory):
    out = tmp_path_factory.mktemp("fb") / "ref.npz"
    _run_ref(_FB_REF, str(out))
    return dict(np.load(out))


def _compare(name, ours, ref, tol):
    assert ours.dtype == np.float32 and ours.shape == ref.shape, (name, ours.dtype, ours.shape, ref.shape)
    diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    max_abs = float(diff.max())
    rel = max_abs / float(np.abs(ref).max())
    print(f"{name}: shape={ours.shape} max_abs={max_abs:.3e} rel={rel:.3e} differing={int((diff > 0).sum())}")
    assert max_abs <= tol, f"{name}: max_abs {max_abs:.3e} > {tol:.1e} (rel {rel:.3e})"


def test_mel_24k_filterbank(fb_ref):
    _compare("mel_24k", filterbanks.mel_24k_filterbank(), fb_ref["mel24"], 1e-6)
    assert filterbanks.mel_24k_filterbank().shape == (80, 961) == (filterbanks.MEL_24K["n_mels"],
                                                                   filterbanks.MEL_24K["n_freqs"])


def test_ve_mel_filterbank(fb_ref):
    _compare("ve_mel", filterbanks.ve_mel_filterbank(), fb_ref["ve"], 1e-6)
    assert filterbanks.ve_mel_filterbank().shape == (40, 201)
    for k, v in zip(fb_ref["ve_hp_keys"], fb_ref["ve_hp_vals"]):
        assert float(filterbanks.VE_MEL[str(k)]) == v, k


def test_kaldi_fbank_filterbank(fb_ref):
    ours = filterbanks.kaldi_fbank_filterbank()
    assert ours.shape == (80, 257) and not ours[:, 256].any()
    # torch evaluates log(1 + f/700) with its vectorised float32 libm (<= 1 ulp, CPU dependent);
    # ours is the correctly rounded float32 log.  1 ulp of a ~2800 mel value over a ~35 mel
    # triangle side is ~7e-6 of weight; allow 1e-5 overall ...
    _compare("kaldi_fbank", ours, fb_ref["kaldi"], 1e-5)
    # ... and require bit-exactness for everything else, given torch's own per-bin mel values.
    injected = np.pad(filterbanks.kaldi_mel_banks(80, 512, 16000.0, 20.0, 0.0, fft_bin_mels=fb_ref["kaldi_bin_mels"]),
                      ((0, 0), (0, 1)))
    _compare("kaldi_fbank[torch bin mels]", injected.astype(np.float32), fb_ref["kaldi"], 0.0)
    # the libm difference moves a bin mel value by at most 2 float32 ulps (1 ulp of log, x1127)
    ours_mels = np.float32(1127.0) * np.log(
        (np.float32(1) + np.float32(16000 / 512) * np.arange(256, dtype=np.float32) / np.float32(700)).astype(
            np.float64)).astype(np.float32)
    ulps = np.abs(ours_mels.view(np.int32).astype(np.int64) - fb_ref["kaldi_bin_mels"].view(np.int32))
    assert ulps.max() <= 2, ulps.max()


def test_filterbank_params_are_scalars():
    for params in (filterbanks.MEL_24K, filterbanks.VE_MEL, filterbanks.KALDI_FBANK):
        for k, v in params.items():
            assert isinstance(v, (bool, int, float, str)), (k, v)
    assert filterbanks.KALDI_FBANK["n_fft"] == 512 and filterbanks.KALDI_FBANK["win"] == 400


# ------------------------------------------------------------------------------------------
# torch_pickle
# ------------------------------------------------------------------------------------------

_PT_REF = """
import sys, os, numpy as np, torch
from chatterbox.models.t3.modules.cond_enc import T3Cond
out = sys.argv[1]
torch.manual_seed(0)
base = torch.randn(6, 8)
tensors = {
    "f32": torch.randn(3, 4),
    "i64": torch.arange(-5, 7, dtype=torch.int64).reshape(3, 4),
    "i32": torch.tensor([1, -2, 2**31 - 1], dtype=torch.int32),
    "bool": torch.tensor([[True, False], [False, True]]),
    "f16": torch.randn(5).half(),
    "bf16": torch.randn(7).bfloat16(),
    "f64": torch.randn(2, 2, dtype=torch.float64),
    "u8": torch.arange(250, 256, dtype=torch.uint8),
    "slice": base[1:5:2, 3:7],      # non-contiguous view with an offset into a shared storage
    "transpose": base.t(),
    "base": base,
    "scalar": torch.tensor(3.25),
    "scalar_i": torch.tensor(-7),
    "empty": torch.zeros(0, 3),
    "expanded": torch.arange(3.0).reshape(3, 1).expand(3, 4),
}
obj = {
    "tensors": tensors,
    "none": None,
    "float": 0.5,
    "int": 42,
    "str": "hello",
    "list": [torch.ones(2), 1, (2, "x")],
    "nested": {"a": {"b": torch.full((2, 2), 7.0), "c": None}},
}
torch.save(obj, os.path.join(out, "mixed.pt"))
torch.save(obj, os.path.join(out, "mixed_legacy.pt"), _use_new_zipfile_serialization=False)
flat = {}
def walk(prefix, o):
    if isinstance(o, torch.Tensor):
        flat[prefix] = (o.float() if o.dtype == torch.bfloat16 else o).numpy()
    elif isinstance(o, dict):
        for k, v in o.items():
            walk(prefix + "/" + str(k), v)
    elif isinstance(o, (list, tuple)):
        for i, v in enumerate(o):
            walk(prefix + "/" + str(i), v)
walk("", obj)
np.savez(os.path.join(out, "mixed.npz"), **flat)

t3 = T3Cond(speaker_emb=torch.randn(1, 256), cond_prompt_speech_tokens=torch.randint(0, 6561, (1, 150)),
            emotion_adv=0.5 * torch.ones(1, 1, 1))
gen = dict(prompt_token=torch.randint(0, 6561, (1, 250)), prompt_token_len=torch.tensor([250]),
           prompt_feat=torch.randn(1, 500, 80), prompt_feat_len=None, embedding=torch.randn(1, 192))
# chatterbox Conditionals.save(): torch.save(dict(t3=self.t3.__dict__, gen=self.gen), fpath)
torch.save(dict(t3=t3.__dict__, gen=gen), os.path.join(out, "conds.pt"))
flat = {}
walk("", dict(t3=t3.__dict__, gen=gen))
np.savez(os.path.join(out, "conds.npz"), **flat)
with open(os.path.join(out, "conds_keys.txt"), "w") as f:
    f.write(repr({k: (None if v is None else type(v).__name__) for k, v in t3.__dict__.items()}))

class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(out, "PWNED"),))
torch.save({"x": torch.ones(1), "evil": Evil()}, os.path.join(out, "evil_reduce.pt"))
torch.save({"x": torch.ones(1), "evil": Evil()}, os.path.join(out, "evil_legacy.pt"),
           _use_new_zipfile_serialization=False)

class Custom:
    def __init__(self):
        self.w = torch.ones(2)
torch.save({"c": Custom()}, os.path.join(out, "custom.pt"))
torch.save({"p": torch.nn.Parameter(torch.arange(4.0))}, os.path.join(out, "param.pt"))
torch.save({"x": torch.ones(3)}, os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
"""


@pytest.fixture(scope="module")
def pt_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("pt")
    _run_ref(_PT_REF, str(out))
    return out


def _flatten(prefix, o, flat):
    if isinstance(o, np.ndarray):
        flat[prefix] = o
    elif isinstance(o, dict):
        for k, v in o.items():
            _flatten(prefix + "/" + str(k), v, flat)
    elif isinstance(o, (list, tuple)):
        for i, v in enumerate(o):
            _flatten(prefix + "/" + str(i), v, flat)
    return flat


def _check_same(loaded, npz_path):
    want = dict(np.load(npz_path))
    got = _flatten("", loaded, {})
    assert sorted(got) == sorted(want)
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, g.dtype, w.shape, w.dtype)
        assert g.flags.c_contiguous, k
        assert np.array_equal(g, w) and g.tobytes() == w.tobytes(), k


@pytest.mark.parametrize("name", ["mixed.pt", "mixed_legacy.pt"])
def test_load_pt_mixed(pt_dir, name):
    """The zip format and the legacy one (torch.save(..., _use_new_zipfile_serialization=False))."""
    obj = torch_pickle.load_pt(pt_dir / name)
    _check_same(obj, pt_dir / "mixed.npz")
    assert obj["none"] is None and obj["float"] == 0.5 and obj["int"] == 42 and obj["str"] == "hello"
    assert obj["list"][1] == 1 and tuple(obj["list"][2]) == (2, "x")
    assert obj["nested"]["a"]["c"] is None
    t = obj["tensors"]
    assert t["scalar"].shape == () and t["scalar"].dtype == np.float32 and float(t["scalar"]) == 3.25
    assert t["scalar_i"].shape == () and t["scalar_i"].dtype == np.int64 and int(t["scalar_i"]) == -7
    assert t["bf16"].dtype == np.float32 and t["f16"].dtype == np.float16 and t["bool"].dtype == np.bool_
    assert t["empty"].shape == (0, 3)
    np.testing.assert_array_equal(t["slice"], t["base"][1:5:2, 3:7])
    np.testing.assert_array_equal(t["transpose"], t["base"].T)


def test_load_pt_conditionals(pt_dir):
    obj = torch_pickle.load_pt(str(pt_dir / "conds.pt"))
    _check_same(obj, pt_dir / "conds.npz")
    keys = eval((pt_dir / "conds_keys.txt").read_text())  # noqa: S307 - our own repr of {str: str|None}
    assert set(obj["t3"]) == set(keys)
    for k, v in keys.items():
        assert (obj["t3"][k] is None) == (v is None), k
    assert obj["gen"]["prompt_feat_len"] is None
    assert obj["gen"]["prompt_feat"].shape == (1, 500, 80) and obj["gen"]["prompt_token"].dtype == np.int64
    assert obj["t3"]["speaker_emb"].shape == (1, 256)


def test_load_pt_parameter(pt_dir):
    obj = torch_pickle.load_pt(pt_dir / "param.pt")
    np.testing.assert_array_equal(obj["p"], np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("name", ["evil_reduce.pt", "evil_legacy.pt"])
def test_load_pt_refuses_reduce_global(pt_dir, name):
    path = pt_dir / name
    with pytest.raises(torch_pickle.UnsafePickleError) as e:
        torch_pickle.load_pt(path)
    assert str(path) in str(e.value) and "system" in str(e.value)
    assert not (pt_dir / "PWNED").exists()


def test_load_pt_refuses_custom_class(pt_dir):
    path = pt_dir / "custom.pt"
    with pytest.raises(torch_pickle.UnsafePickleError) as e:
        torch_pickle.load_pt(path)
    assert str(path) in str(e.value) and "Custom" in str(e.value)


def test_load_pt_refuses_crafted_os_system(tmp_path):
    marker = tmp_path / "PWNED"

    class Boom:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "crafted.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"a": Boom()}, protocol=2))
        zf.writestr("archive/version", "3\n")
    with pytest.raises(torch_pickle.UnsafePickleError) as e:
        torch_pickle.load_pt(path)
    msg = str(e.value)
    assert str(path) in msg and ("posix.system" in msg or "os.system" in msg), msg
    assert not marker.exists()
    # the error is also a TorchPickleError / ValueError, so one except clause catches both
    assert isinstance(e.value, torch_pickle.TorchPickleError) and isinstance(e.value, ValueError)


def test_load_pt_truncated(pt_dir, tmp_path):
    data = (pt_dir / "conds.pt").read_bytes()
    for cut in (len(data) // 2, len(data) - 30, 100):
        path = tmp_path / f"trunc_{cut}.pt"
        path.write_bytes(data[:cut])
        with pytest.raises(torch_pickle.TorchPickleError) as e:
            torch_pickle.load_pt(path)
        assert str(path) in str(e.value)


def test_load_pt_not_zip_and_missing(tmp_path):
    path = tmp_path / "text.pt"
    path.write_text("definitely not a zip archive\n" * 10)
    with pytest.raises(torch_pickle.TorchPickleError) as e:
        torch_pickle.load_pt(path)
    assert str(path) in str(e.value)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(torch_pickle.TorchPickleError, match="empty.pt"):
        torch_pickle.load_pt(empty)
    missing = tmp_path / "nope.pt"
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        torch_pickle.load_pt(missing)


def test_load_pt_zip_without_data_pkl(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/readme.txt", "hi")
    with pytest.raises(torch_pickle.TorchPickleError, match="data.pkl") as e:
        torch_pickle.load_pt(path)
    assert str(path) in str(e.value)


def test_load_pt_legacy(pt_dir):
    assert np.array_equal(torch_pickle.load_pt(pt_dir / "legacy.pt")["x"], np.ones(3, np.float32))


def test_load_pt_legacy_truncated(pt_dir, tmp_path):
    data = (pt_dir / "mixed_legacy.pt").read_bytes()
    path = tmp_path / "cut.pt"
    path.write_bytes(data[: len(data) - 10])
    with pytest.raises(torch_pickle.TorchPickleError) as e:
        torch_pickle.load_pt(path)
    assert str(path) in str(e.value)
