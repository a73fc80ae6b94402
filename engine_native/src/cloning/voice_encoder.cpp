#include "cloning/voice_encoder.h"

#include "core/window.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>
#include <thread>

namespace cbs {

namespace {

std::vector<float> transpose(const std::vector<float>& w, int rows, int cols) {
    std::vector<float> t(w.size());
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) t[static_cast<size_t>(c) * rows + r] = w[static_cast<size_t>(r) * cols + c];
    return t;
}

// C[M][N] += A[M][K] * BT[K][N], all row-major. The innermost loop is an axpy over a
// contiguous block of N (vectorises without reassociating any sum); the blocks keep a
// strip of C and a row of BT in L1. Where the toolchain can, an AVX2 copy is picked at
// load time on CPUs that have it (without FMA: every product and sum rounds as in the
// portable copy, so the result is the same bit for bit).
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx2", "default")))
#endif
void gemm_acc(int64_t M, int N, int K, const float* A, const float* BT, float* C) {
    constexpr int NB = 256;
    constexpr int64_t MB = 8;
    for (int n0 = 0; n0 < N; n0 += NB) {
        const int nb = std::min(NB, N - n0);
        for (int64_t m0 = 0; m0 < M; m0 += MB) {
            const int64_t m1 = std::min(M, m0 + MB);
            for (int k = 0; k < K; ++k) {
                const float* b = BT + static_cast<size_t>(k) * N + n0;
                for (int64_t m = m0; m < m1; ++m) {
                    const float a = A[static_cast<size_t>(m) * K + k];
                    float* c = C + static_cast<size_t>(m) * N + n0;
                    for (int j = 0; j < nb; ++j) c[j] += a * b[j];
                }
            }
        }
    }
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

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
    std::vector<float> fb = mf.read_f32(mf.tensor("fb.ve_mel", {n_freq_, n_mels_}));
    if (static_cast<int>(fb.size()) != n_mels_ * n_freq_ || n_fft_ < 2 || n_fft_ % 2 != 0 || i("win") != n_fft_)
        throw ModelError(mf.path() + ": fb.ve_mel has the wrong size");
    // the framing embed() divides by: hops, the trim frame, the partials and their step
    if (hop_ < 1 || trim_hop_ < 1 || trim_frame_ < 1 || partial_ < 1 || !(rate_ > 0.0f) ||
        std::lround((16000.0 / rate_) / partial_) < 1)
        throw ModelError(mf.path() + ": chatterbox.fb.ve_mel framing (hop, trim, partial_frames, rate) is invalid");
    fb_ = MelBank(std::move(fb), n_mels_, n_freq_);
    fft_ = RealFft(n_fft_);
    window_ = hann_window(i("win"), /*periodic=*/true);  // scipy get_window("hann", fftbins=True)
    hidden_ = static_cast<int>(mf.get_int("chatterbox.ve.n_hidden"));
    for (int l = 0; l < mf.get_int("chatterbox.ve.n_layer"); ++l) {
        const std::string s = std::to_string(l);
        Layer L;
        const int64_t H4 = 4 * int64_t{hidden_};
        const std::vector<float> w_ih = mf.read_f32(mf.tensor("ve.lstm.weight_ih_l" + s, {l == 0 ? n_mels_ : hidden_, H4}));
        const std::vector<float> w_hh = mf.read_f32(mf.tensor("ve.lstm.weight_hh_l" + s, {hidden_, H4}));
        std::vector<float> b_ih = mf.read_f32(mf.tensor("ve.lstm.bias_ih_l" + s, {H4}));
        std::vector<float> b_hh = mf.read_f32(mf.tensor("ve.lstm.bias_hh_l" + s, {H4}));
        L.in = static_cast<int>(w_ih.size() / (4 * hidden_));
        if (L.in != (l == 0 ? n_mels_ : hidden_) || w_ih.size() != static_cast<size_t>(4 * hidden_) * L.in ||
            w_hh.size() != static_cast<size_t>(4 * hidden_) * hidden_ || b_ih.size() != static_cast<size_t>(4 * hidden_) ||
            b_hh.size() != b_ih.size())
            throw ModelError(mf.path() + ": ve.lstm layer " + s + " has the wrong shape");
        L.w_ih_t = transpose(w_ih, 4 * hidden_, L.in);
        L.w_hh_t = transpose(w_hh, 4 * hidden_, hidden_);
        L.b.resize(b_ih.size());
        for (size_t k = 0; k < b_ih.size(); ++k) L.b[k] = b_ih[k] + b_hh[k];
        layers_.push_back(std::move(L));
    }
    const int64_t E = mf.get_int("chatterbox.ve.embed_dim");
    proj_w_ = mf.read_f32(mf.tensor("ve.proj.weight", {hidden_, E}));
    proj_b_ = mf.read_f32(mf.tensor("ve.proj.bias", {E}));
    embed_dim_ = static_cast<int>(proj_b_.size());
    if (layers_.empty() || proj_w_.size() != static_cast<size_t>(embed_dim_) * hidden_)
        throw ModelError(mf.path() + ": ve.proj does not match the LSTM");
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

std::vector<float> VoiceEncoder::mel(const float* wav16k, int64_t n_in) const {
    const std::vector<float> y = trim(std::vector<float>(wav16k, wav16k + n_in));
    const int64_t n = static_cast<int64_t>(y.size()), pad = n_fft_ / 2;
    if (n <= pad) throw EngineError("too little sound for the voice encoder after trimming silence");
    const int64_t frames = 1 + n / hop_;
    std::vector<float> out(static_cast<size_t>(frames) * n_mels_);
    std::vector<double> frame(n_fft_), power(n_freq_);
    std::vector<double> scratch(fft_.scratch_size());
    for (int64_t t = 0; t < frames; ++t) {
        reflect_windowed_frame(y.data(), n, t * hop_ - pad, window_, frame.data());  // centred, reflect padded
        fft_.power(frame.data(), power.data(), scratch.data());
        for (int m = 0; m < n_mels_; ++m) {
            const float* w = fb_.row(m);
            double acc = 0.0;
            for (int k = fb_.lo[m]; k < fb_.hi[m]; ++k) acc += static_cast<double>(w[k]) * power[k];
            out[static_cast<size_t>(t) * n_mels_ + m] = static_cast<float>(acc);
        }
    }
    return out;
}

// A batch of partials through the LSTM: per layer, the input projections of all steps of
// all partials in one product, then the recurrence step by step over the whole batch.
void VoiceEncoder::run_partials(const float* mel, int64_t step, int64_t first, int64_t count, float* h_final) const {
    const int H = hidden_, G = 4 * hidden_, T = partial_;
    const int64_t rows = count * T;
    std::vector<float> x(static_cast<size_t>(rows) * n_mels_);
    for (int64_t b = 0; b < count; ++b)  // partial b = frames (first + b) * step .. + T
        std::copy(mel + (first + b) * step * n_mels_, mel + ((first + b) * step + T) * n_mels_,
                  x.begin() + b * T * n_mels_);
    std::vector<float> xp(static_cast<size_t>(rows) * G), h(static_cast<size_t>(count) * H), c(h.size());
    std::vector<float> gates(static_cast<size_t>(count) * G), y;
    for (size_t l = 0; l < layers_.size(); ++l) {
        const Layer& L = layers_[l];
        const bool last = l + 1 == layers_.size();
        for (int64_t r = 0; r < rows; ++r) std::copy(L.b.begin(), L.b.end(), xp.begin() + r * G);
        gemm_acc(rows, G, L.in, x.data(), L.w_ih_t.data(), xp.data());
        std::fill(h.begin(), h.end(), 0.0f);
        std::fill(c.begin(), c.end(), 0.0f);
        if (!last) y.assign(static_cast<size_t>(rows) * H, 0.0f);
        for (int t = 0; t < T; ++t) {
            for (int64_t b = 0; b < count; ++b)
                std::copy(xp.begin() + (b * T + t) * G, xp.begin() + (b * T + t + 1) * G, gates.begin() + b * G);
            gemm_acc(count, G, H, h.data(), L.w_hh_t.data(), gates.data());
            for (int64_t b = 0; b < count; ++b) {
                const float* g = &gates[b * G];
                float* hb = &h[b * H];
                float* cb = &c[b * H];
                for (int k = 0; k < H; ++k) {
                    const float ig = sigmoid(g[k]), fg = sigmoid(g[H + k]);
                    const float gg = std::tanh(g[2 * H + k]), og = sigmoid(g[3 * H + k]);
                    cb[k] = fg * cb[k] + ig * gg;
                    hb[k] = og * std::tanh(cb[k]);
                }
                if (!last) std::copy(hb, hb + H, y.begin() + (b * T + t) * H);
            }
        }
        if (!last) x.swap(y);
    }
    std::copy(h.begin(), h.end(), h_final);
}

std::vector<float> VoiceEncoder::embed(const float* wav16k, int64_t n, int threads) const {
    for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(wav16k[i])) throw EngineError("audio contains NaN or infinite samples");
    std::vector<float> m = mel(wav16k, n);
    const int64_t n_frames = static_cast<int64_t>(m.size()) / n_mels_;
    // Partials as VoiceEncoder.inference: step from the rate, count by min_coverage, zero pad.
    const int step = static_cast<int>(std::lround((16000.0 / rate_) / partial_));
    int64_t n_wins = std::max<int64_t>(n_frames - partial_ + step, 0) / step;
    const int64_t rem = std::max<int64_t>(n_frames - partial_ + step, 0) % step;
    if (n_wins == 0 || static_cast<double>(rem + (partial_ - step)) / partial_ >= min_coverage_) ++n_wins;
    const int64_t target = partial_ + step * (n_wins - 1);
    m.resize(static_cast<size_t>(std::max(target, n_frames)) * n_mels_, 0.0f);

    // Batches of at most 16 partials bound the memory for long recordings; threads take
    // contiguous runs of partials.
    const int H = hidden_;
    std::vector<float> h_final(static_cast<size_t>(n_wins) * H);
    auto run = [&](int64_t w0, int64_t w1) {
        constexpr int64_t kBatch = 16;
        for (int64_t w = w0; w < w1; w += kBatch)
            run_partials(m.data(), step, w, std::min(kBatch, w1 - w), &h_final[static_cast<size_t>(w) * H]);
    };
    const int64_t n_threads = std::max<int64_t>(1, std::min<int64_t>(threads, n_wins));
    if (n_threads == 1) {
        run(0, n_wins);
    } else {
        std::vector<std::thread> pool;
        std::vector<std::exception_ptr> errors(n_threads);
        for (int64_t i = 0; i < n_threads; ++i)
            pool.emplace_back([&, i] {
                try {
                    run(n_wins * i / n_threads, n_wins * (i + 1) / n_threads);
                } catch (...) {
                    errors[i] = std::current_exception();
                }
            });
        for (std::thread& th : pool) th.join();
        for (const std::exception_ptr& e : errors)
            if (e) std::rethrow_exception(e);
    }

    // Each final hidden state -> ReLU(proj) -> L2 normalise; the mean, L2 normalised.
    std::vector<double> sum(embed_dim_, 0.0), e(embed_dim_);
    for (int64_t w = 0; w < n_wins; ++w) {
        const float* h = &h_final[static_cast<size_t>(w) * H];
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
