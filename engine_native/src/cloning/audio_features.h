// Spectral features of voice recordings, as the reference computes them. Host code:
// a double-precision FFT per frame (cheap at these sizes) keeps quiet bins exact.
#pragma once

#include <cstdint>
#include <vector>

#include "core/fft.h"
#include "core/model_file.h"

namespace cbs {

// A mel filterbank, row-major [n_mels][n_freq], with each filter's nonzero bins [lo, hi):
// the dot products skip the zeros (adding exact zeros changes no sum).
struct MelBank {
    MelBank() = default;
    MelBank(std::vector<float> weights, int n_mels, int n_freq);
    const float* row(int m) const { return &w[static_cast<size_t>(m) * n_freq]; }
    int n_mels = 0, n_freq = 0;
    std::vector<float> w;
    std::vector<int> lo, hi;
};

// S3Gen's 24 kHz, 80-bin log-mel (`s3gen.utils.mel.mel_spectrogram`, the voice's prompt_feat):
// reflect pad, periodic-Hann STFT without centring, magnitude, Slaney mel, log(clamp).
class Mel24k {
public:
    explicit Mel24k(const ModelFile& mf);

    // wav at 24 kHz -> row-major [n_frames][n_mels].
    std::vector<float> compute(const float* wav, int64_t n) const;
    std::vector<float> compute(const std::vector<float>& wav) const { return compute(wav.data(), wav.size()); }
    int n_mels() const { return n_mels_; }

private:
    int n_fft_, hop_, win_, pad_, n_mels_, n_freq_;
    float mag_eps_, log_clip_;
    MelBank fb_;
    std::vector<float> window_;
    RealFft fft_;
};

// Kaldi 80-bin log filterbank as `torchaudio.compliance.kaldi.fbank(wav, num_mel_bins=80)`
// computes it with its defaults at 16 kHz (CAMPPlus's input, before its mean subtraction):
// snip-edge frames, DC removal, pre-emphasis, Povey window, zero pad to a power of two,
// power spectrum, mel banks, log with a float-eps floor. No int16 scaling (the reference
// feeds [-1, 1] floats).
class KaldiFbank {
public:
    explicit KaldiFbank(const ModelFile& mf);
    // wav at 16 kHz -> row-major [n_frames][n_mels].
    std::vector<float> compute(const float* wav, int64_t n) const;
    std::vector<float> compute(const std::vector<float>& wav) const { return compute(wav.data(), wav.size()); }
    int n_mels() const { return n_mels_; }

private:
    int win_, hop_, n_fft_, n_mels_, n_freq_;
    float preemph_, log_floor_;
    bool remove_dc_;
    MelBank fb_;
    std::vector<float> window_;  // Povey, win_ values
    RealFft fft_;
};

// S3TokenizerV2's Whisper-style 128-bin log-mel (`S3Tokenizer.log_mel_spectrogram`):
// centred reflect-padded STFT with the model's window, power, drop the last frame,
// log10(clamp 1e-10), floor at max - 8, then (x + 4) / 4.
class S3TokLogMel {
public:
    explicit S3TokLogMel(const ModelFile& mf);
    // wav at 16 kHz -> row-major [n_mels][n_frames] (the reference's [128, T] layout).
    std::vector<float> compute(const float* wav, int64_t n, int64_t* n_frames) const;
    std::vector<float> compute(const std::vector<float>& wav, int64_t* n_frames) const {
        return compute(wav.data(), wav.size(), n_frames);
    }
    int n_mels() const { return n_mels_; }

private:
    int n_fft_, hop_, n_mels_, n_freq_;
    MelBank fb_;
    std::vector<float> window_;
    RealFft fft_;
};

}  // namespace cbs
