#include "voice_encoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "fft.h"

namespace cbs {

VoiceEncoder::VoiceEncoder(const ModelFile& mf) {
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(std::string("chatterbox.fb.ve_mel.") + k)); };
    auto f = [&](const char* k) { return static_cast<float>(mf.get_float(std::string("chatterbox.fb.ve_mel.") + k)); };
    n_fft_ = i("n_fft");
    hop_ = i("hop");
    n_mels_ = i("n_mels");
    n_freq_ = n_fft_ / 2 + 1;
    partial_ = i("partial_frames");
    trim_frame_ = i("trim_frame_length");
    trim_hop_ = i("trim_hop");
    rate_ = f("rate");
    min_coverage_ = f("min_coverage");
    trim_top_db_ = f("trim_top_db");
    fb_ = mf.read_f32(mf.tensor("fb.ve_mel"));
    if (static_cast<int>(fb_.size()) != n_mels_ * n_freq_) throw EngineError(mf.path() + ": fb.ve_mel has the wrong size");
    window_.resize(i("win"));
    for (size_t n = 0; n < window_.size(); ++n)  // scipy get_window("hann", fftbins=True)
        window_[n] = static_cast<float>(0.5 - 0.5 * std::cos(2.0 * M_PI * n / window_.size()));
    hidden_ = static_cast<int>(mf.get_int("chatterbox.ve.n_hidden"));
    for (int l = 0; l < mf.get_int("chatterbox.ve.n_layer"); ++l) {
        const std::string s = std::to_string(l);
        Layer L;
        L.w_ih = mf.read_f32(mf.tensor("ve.lstm.weight_ih_l" + s));
        L.w_hh = mf.read_f32(mf.tensor("ve.lstm.weight_hh_l" + s));
        std::vector<float> b_ih = mf.read_f32(mf.tensor("ve.lstm.bias_ih_l" + s));
        std::vector<float> b_hh = mf.read_f32(mf.tensor("ve.lstm.bias_hh_l" + s));
        L.b.resize(b_ih.size());
        for (size_t k = 0; k < b_ih.size(); ++k) L.b[k] = b_ih[k] + b_hh[k];
        L.in = static_cast<int>(L.w_ih.size() / (4 * hidden_));
        layers_.push_back(std::move(L));
    }
    proj_w_ = mf.read_f32(mf.tensor("ve.proj.weight"));
    proj_b_ = mf.read_f32(mf.tensor("ve.proj.bias"));
    embed_dim_ = static_cast<int>(proj_b_.size());
}

// librosa.effects.trim(y, top_db): RMS of centred, zero-padded frames; keep from the first
// to the last frame within top_db of the loudest.
std::vector<float> VoiceEncoder::trim(const std::vector<float>& y) const {
    const int64_t n = static_cast<int64_t>(y.size()), half = trim_frame_ / 2;
    const int64_t frames = 1 + n / trim_hop_;
    std::vector<double> mse(frames);
    for (int64_t t = 0; t < frames; ++t) {
        double acc = 0.0;
        for (int64_t k = 0; k < trim_frame_; ++k) {
            const int64_t idx = t * trim_hop_ + k - half;
            if (idx >= 0 && idx < n) acc += static_cast<double>(y[idx]) * y[idx];
        }
        mse[t] = acc / trim_frame_;
    }
    const double ref = std::max(1e-10, *std::max_element(mse.begin(), mse.end()));
    int64_t first = -1, last = -1;
    for (int64_t t = 0; t < frames; ++t) {
        const double db = 10.0 * std::log10(std::max(1e-10, mse[t])) - 10.0 * std::log10(ref);
        if (db > -trim_top_db_) {
            if (first < 0) first = t;
            last = t;
        }
    }
    if (first < 0) return {};
    const int64_t start = first * trim_hop_, end = std::min(n, (last + 1) * trim_hop_);
    return std::vector<float>(y.begin() + start, y.begin() + end);
}

std::vector<float> VoiceEncoder::mel(const std::vector<float>& wav16k) const {
    const std::vector<float> y = trim(wav16k);
    const int64_t n = static_cast<int64_t>(y.size()), pad = n_fft_ / 2;
    if (n <= pad) throw EngineError("too little sound for the voice encoder after trimming silence");
    const int64_t frames = 1 + n / hop_;
    std::vector<float> out(static_cast<size_t>(frames) * n_mels_);
    std::vector<double> frame(n_fft_);
    for (int64_t t = 0; t < frames; ++t) {
        reflect_windowed_frame(y, t * hop_ - pad, window_, frame);  // centred, reflect padded
        const std::vector<double> power = rfft_magnitude(frame, /*power=*/true);
        for (int m = 0; m < n_mels_; ++m) {
            double acc = 0.0;
            for (int k = 0; k < n_freq_; ++k) acc += static_cast<double>(fb_[static_cast<size_t>(m) * n_freq_ + k]) * power[k];
            out[static_cast<size_t>(t) * n_mels_ + m] = static_cast<float>(acc);
        }
    }
    return out;
}

static float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

std::vector<float> VoiceEncoder::embed(const std::vector<float>& wav16k) const {
    for (float v : wav16k)
        if (!std::isfinite(v)) throw EngineError("audio contains NaN or infinite samples");
    std::vector<float> m = mel(wav16k);
    const int64_t n_frames = static_cast<int64_t>(m.size()) / n_mels_;
    // Partials as VoiceEncoder.inference: step from the rate, count by min_coverage, zero pad.
    const int step = static_cast<int>(std::lround((16000.0 / rate_) / partial_));
    int64_t n_wins = std::max<int64_t>(n_frames - partial_ + step, 0) / step;
    const int64_t rem = std::max<int64_t>(n_frames - partial_ + step, 0) % step;
    if (n_wins == 0 || static_cast<double>(rem + (partial_ - step)) / partial_ >= min_coverage_) ++n_wins;
    const int64_t target = partial_ + step * (n_wins - 1);
    m.resize(static_cast<size_t>(std::max(target, n_frames)) * n_mels_, 0.0f);

    const int H = hidden_;
    std::vector<double> sum(embed_dim_, 0.0);
    std::vector<float> seq, h(H), c(H), gates(4 * H), next;
    for (int64_t w = 0; w < n_wins; ++w) {
        seq.assign(m.begin() + w * step * n_mels_, m.begin() + (w * step + partial_) * n_mels_);
        int in = n_mels_;
        for (const Layer& L : layers_) {
            std::fill(h.begin(), h.end(), 0.0f);
            std::fill(c.begin(), c.end(), 0.0f);
            next.assign(static_cast<size_t>(partial_) * H, 0.0f);
            for (int t = 0; t < partial_; ++t) {
                const float* x = &seq[static_cast<size_t>(t) * in];
                for (int g = 0; g < 4 * H; ++g) {
                    const float* wi = &L.w_ih[static_cast<size_t>(g) * in];
                    const float* wh = &L.w_hh[static_cast<size_t>(g) * H];
                    float acc = L.b[g];
                    for (int k = 0; k < in; ++k) acc += wi[k] * x[k];
                    for (int k = 0; k < H; ++k) acc += wh[k] * h[k];
                    gates[g] = acc;
                }
                for (int k = 0; k < H; ++k) {
                    const float ig = sigmoid(gates[k]), fg = sigmoid(gates[H + k]);
                    const float gg = std::tanh(gates[2 * H + k]), og = sigmoid(gates[3 * H + k]);
                    c[k] = fg * c[k] + ig * gg;
                    h[k] = og * std::tanh(c[k]);
                }
                std::copy(h.begin(), h.end(), next.begin() + static_cast<size_t>(t) * H);
            }
            seq.swap(next);
            in = H;
        }
        // Final hidden state -> ReLU(proj) -> L2 normalise; accumulate for the mean.
        std::vector<double> e(embed_dim_);
        double norm = 0.0;
        for (int o = 0; o < embed_dim_; ++o) {
            double acc = proj_b_[o];
            for (int k = 0; k < H; ++k) acc += static_cast<double>(proj_w_[static_cast<size_t>(o) * H + k]) * h[k];
            e[o] = std::max(0.0, acc);
            norm += e[o] * e[o];
        }
        norm = std::sqrt(norm);
        for (int o = 0; o < embed_dim_; ++o) sum[o] += norm > 0 ? e[o] / norm : 0.0;
    }
    double norm = 0.0;
    for (double v : sum) norm += v * v;
    norm = std::sqrt(norm);
    if (norm == 0.0) throw EngineError("the voice encoder produced an empty embedding (silent audio?)");
    std::vector<float> out(embed_dim_);
    for (int o = 0; o < embed_dim_; ++o) out[o] = static_cast<float>(sum[o] / norm);
    return out;
}

}  // namespace cbs
