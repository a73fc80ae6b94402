#include "cloning/audio_features.h"

#include "core/window.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace cbs {

MelBank::MelBank(std::vector<float> weights, int mels, int freq)
    : n_mels(mels), n_freq(freq), w(std::move(weights)), lo(mels), hi(mels) {
    for (int m = 0; m < n_mels; ++m) {
        const float* r = row(m);
        int a = 0, b = n_freq;
        while (a < b && r[a] == 0.0f) ++a;
        while (b > a && r[b - 1] == 0.0f) --b;
        lo[m] = a;
        hi[m] = b;
    }
}

namespace {

void check_finite(const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(x[i])) throw EngineError("audio contains NaN or infinite samples");
}

}  // namespace

Mel24k::Mel24k(const ModelFile& mf) {
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(std::string("chatterbox.fb.mel_24k.") + k)); };
    auto f = [&](const char* k) { return static_cast<float>(mf.get_float(std::string("chatterbox.fb.mel_24k.") + k)); };
    n_fft_ = i("n_fft");
    hop_ = i("hop");
    win_ = i("win");
    pad_ = i("pad_left");
    n_mels_ = i("n_mels");
    n_freq_ = n_fft_ / 2 + 1;
    mag_eps_ = f("magnitude_eps");
    log_clip_ = f("log_clip");
    const ggml_tensor* filterbank = mf.tensor("fb.mel_24k", {n_freq_, n_mels_});  // ne [n_freq, n_mels]
    if (win_ != n_fft_ || n_fft_ < 2 || n_fft_ % 2 != 0 || hop_ < 1 || pad_ < 0 || filterbank->ne[0] != n_freq_ ||
        filterbank->ne[1] != n_mels_)
        throw ModelError(mf.path() + ": fb.mel_24k does not match its STFT parameters");
    window_ = hann_window(win_, /*periodic=*/true);

    fb_ = MelBank(mf.read_f32(filterbank), n_mels_, n_freq_);
    fft_ = RealFft(n_fft_);
}

std::vector<float> Mel24k::compute(const float* wav, int64_t n) const {
    if (n <= pad_) throw EngineError("audio too short for the 24 kHz mel (" + std::to_string(n) + " samples)");
    check_finite(wav, n);
    // F.pad(reflect, pad) then frames without centring == reflect-indexed frames at f*hop - pad.
    const int64_t frames = (n + 2 * pad_ - n_fft_) / hop_ + 1;
    std::vector<float> out(static_cast<size_t>(frames) * n_mels_);
    std::vector<double> frame(n_fft_), power(n_freq_);
    std::vector<double> scratch(fft_.scratch_size());
    std::vector<float> mag(n_freq_);
    for (int64_t f = 0; f < frames; ++f) {
        reflect_windowed_frame(wav, n, f * hop_ - pad_, window_, frame.data());
        fft_.power(frame.data(), power.data(), scratch.data());
        for (int k = 0; k < n_freq_; ++k) mag[k] = std::sqrt(static_cast<float>(power[k]) + mag_eps_);
        for (int m = 0; m < n_mels_; ++m) {
            const float* w = fb_.row(m);
            double acc = 0.0;
            for (int k = fb_.lo[m]; k < fb_.hi[m]; ++k) acc += static_cast<double>(w[k]) * mag[k];
            out[static_cast<size_t>(f) * n_mels_ + m] = std::log(std::max(static_cast<float>(acc), log_clip_));
        }
    }
    return out;
}

KaldiFbank::KaldiFbank(const ModelFile& mf) {
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(std::string("chatterbox.fb.kaldi_80.") + k)); };
    auto f = [&](const char* k) { return static_cast<float>(mf.get_float(std::string("chatterbox.fb.kaldi_80.") + k)); };
    win_ = i("win");
    hop_ = i("hop");
    n_fft_ = i("n_fft");
    n_mels_ = i("n_mels");
    n_freq_ = n_fft_ / 2 + 1;
    preemph_ = f("preemphasis");
    log_floor_ = f("log_floor");
    remove_dc_ = mf.get_bool("chatterbox.fb.kaldi_80.remove_dc_offset");
    const ggml_tensor* fb = mf.tensor("fb.kaldi_80", {n_freq_, n_mels_});
    if (fb->ne[0] != n_freq_ || fb->ne[1] != n_mels_ || win_ < 1 || win_ > n_fft_ || hop_ < 1 || n_fft_ < 2 ||
        n_fft_ % 2 != 0)
        throw ModelError(mf.path() + ": fb.kaldi_80 does not match its frame parameters");
    fb_ = MelBank(mf.read_f32(fb), n_mels_, n_freq_);
    fft_ = RealFft(n_fft_);
    const double exponent = mf.get_float("chatterbox.fb.kaldi_80.window_povey_exponent");
    window_ = hann_window(win_, /*periodic=*/false);  // ** window_povey_exponent, in float32
    for (float& w : window_) w = std::pow(w, static_cast<float>(exponent));
}

std::vector<float> KaldiFbank::compute(const float* wav, int64_t n) const {
    if (n < win_) throw EngineError("audio too short for the fbank (" + std::to_string(n) + " samples, need " +
                                    std::to_string(win_) + ")");
    check_finite(wav, n);
    const int64_t frames = 1 + (n - win_) / hop_;
    std::vector<float> out(static_cast<size_t>(frames) * n_mels_);
    std::vector<float> x(win_);
    std::vector<double> frame(n_fft_, 0.0), power(n_freq_);
    std::vector<double> scratch(fft_.scratch_size());
    for (int64_t t = 0; t < frames; ++t) {
        std::copy(wav + t * hop_, wav + t * hop_ + win_, x.begin());
        if (remove_dc_) {
            float mean = 0.0f;
            double sum = 0.0;
            for (float v : x) sum += v;
            mean = static_cast<float>(sum / win_);
            for (float& v : x) v -= mean;
        }
        for (int k = win_ - 1; k >= 1; --k) x[k] -= preemph_ * x[k - 1];
        x[0] -= preemph_ * x[0];
        for (int k = 0; k < win_; ++k) frame[k] = static_cast<double>(x[k] * window_[k]);
        fft_.power(frame.data(), power.data(), scratch.data());
        for (int m = 0; m < n_mels_; ++m) {
            const float* w = fb_.row(m);
            double acc = 0.0;
            for (int k = fb_.lo[m]; k < fb_.hi[m]; ++k) acc += static_cast<double>(w[k]) * static_cast<float>(power[k]);
            out[static_cast<size_t>(t) * n_mels_ + m] = std::log(std::max(static_cast<float>(acc), log_floor_));
        }
    }
    return out;
}

S3TokLogMel::S3TokLogMel(const ModelFile& mf) {
    n_fft_ = static_cast<int>(mf.get_int("chatterbox.s3tok.n_fft"));
    hop_ = static_cast<int>(mf.get_int("chatterbox.s3tok.hop"));
    n_mels_ = static_cast<int>(mf.get_int("chatterbox.s3tok.n_mels"));
    n_freq_ = n_fft_ / 2 + 1;
    std::vector<float> fb = mf.read_f32(mf.tensor("s3tok._mel_filters", {n_freq_, n_mels_}));
    window_ = mf.read_f32(mf.tensor("s3tok.window", {n_fft_}));
    if (static_cast<int>(fb.size()) != n_mels_ * n_freq_ || static_cast<int>(window_.size()) != n_fft_ || n_fft_ < 2 ||
        n_fft_ % 2 != 0 || hop_ < 1)
        throw ModelError(mf.path() + ": S3Tokenizer mel filters, window or hop do not match its n_fft");
    fb_ = MelBank(std::move(fb), n_mels_, n_freq_);
    fft_ = RealFft(n_fft_);
}

std::vector<float> S3TokLogMel::compute(const float* wav, int64_t n, int64_t* n_frames) const {
    const int64_t pad = n_fft_ / 2;
    if (n <= pad) throw EngineError("audio too short for the speech tokenizer (" + std::to_string(n) + " samples)");
    check_finite(wav, n);
    const int64_t frames = n / hop_;  // 1 + n / hop frames, the last one dropped
    std::vector<float> logmel(static_cast<size_t>(n_mels_) * frames);
    std::vector<double> frame(n_fft_), power(n_freq_);
    std::vector<double> scratch(fft_.scratch_size());
    float peak = -INFINITY;
    for (int64_t t = 0; t < frames; ++t) {
        reflect_windowed_frame(wav, n, t * hop_ - pad, window_, frame.data());
        fft_.power(frame.data(), power.data(), scratch.data());
        for (int m = 0; m < n_mels_; ++m) {
            const float* w = fb_.row(m);
            double acc = 0.0;
            for (int k = fb_.lo[m]; k < fb_.hi[m]; ++k) acc += static_cast<double>(w[k]) * static_cast<float>(power[k]);
            const float v = std::log10(std::max(static_cast<float>(acc), 1e-10f));
            logmel[static_cast<size_t>(m) * frames + t] = v;
            peak = std::max(peak, v);
        }
    }
    for (float& v : logmel) v = (std::max(v, peak - 8.0f) + 4.0f) / 4.0f;
    *n_frames = frames;
    return logmel;
}

}  // namespace cbs
