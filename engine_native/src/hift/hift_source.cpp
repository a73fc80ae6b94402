#include "hift/hift_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "hift/kernels_simd.h"

namespace cbs {

namespace {

// The source's samples before tanh, 8 at a time: merged[i] = b + the sum over harmonics h, in
// order, of w[h] ((voiced ? amp sin(2 pi cum[h][i] + phase[h]) : 0) + noise_amp noise[h][i]),
// for i < n (a multiple of 8; harmonic h's values at h * ld). Every sample takes the same
// lanes' arithmetic wherever it falls, so a source cut into pieces is the same bit for bit.
struct MergeArgs {
    const float *cum, *noise, *phase, *w;
    int64_t ld, n;
    int H;
    float b, amp, noise_amp;
    bool voiced;
};

template <bool kWide>
CBS_INL void merge_body(const MergeArgs& a, float* merged) {
    using V = hiftk::Vec<kWide>;
    static const float zeros[8] = {};
    const float two_pi = static_cast<float>(2.0 * M_PI);
    for (int64_t i = 0; i < a.n; i += 8) {
        V m = hiftk::vload<V>(zeros) + a.b;
        for (int h = 0; h < a.H; ++h) {
            V s = hiftk::vload<V>(zeros);
            if (a.voiced) s = hiftk::sin_small(hiftk::vload<V>(a.cum + h * a.ld + i) * two_pi + a.phase[h]) * a.amp;
            s = s + hiftk::vload<V>(a.noise + h * a.ld + i) * a.noise_amp;
            m = m + s * a.w[h];
        }
        hiftk::vstore(merged + i, m);
    }
}

#ifdef CBS_HIFT_X86
__attribute__((target("avx2,fma"))) void merge_avx2(const MergeArgs& a, float* merged) { merge_body<true>(a, merged); }
#endif

void merge(const MergeArgs& a, float* merged) {
#ifdef CBS_HIFT_X86
    if (hiftk::has_avx2_fma()) return merge_avx2(a, merged);
#endif
    merge_body<false>(a, merged);
}

}  // namespace

NoiseAhead::NoiseAhead(std::mt19937_64 rng, int64_t lead)
    : target_(lead), lead_(lead), rng_(rng), thread_([this] { run(); }) {}

NoiseAhead::~NoiseAhead() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void NoiseAhead::run() {
    std::normal_distribution<float> normal{0.0f, 1.0f};  // keeps its spare draw across blocks
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [this] { return stop_ || drawn_ < target_; });
            if (stop_) return;
        }
        auto block = std::make_unique<float[]>(kBlock);  // drawn outside the lock
        for (int64_t i = 0; i < kBlock; ++i) block[i] = normal(rng_);
        {
            std::lock_guard<std::mutex> lock(mu_);
            blocks_.push_back(std::move(block));
            drawn_ += kBlock;
        }
        cv_.notify_all();
    }
}

void NoiseAhead::expect(int64_t end) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        target_ = std::max(target_, end + lead_);
    }
    cv_.notify_all();
}

void NoiseAhead::read(int64_t from, int64_t count, float* out) {
    if (count <= 0) return;
    std::vector<const float*> blocks;
    {
        std::unique_lock<std::mutex> lock(mu_);
        target_ = std::max(target_, from + count + lead_);
        cv_.notify_all();
        cv_.wait(lock, [&] { return drawn_ >= from + count; });
        for (int64_t b = from / kBlock; b <= (from + count - 1) / kBlock; ++b) blocks.push_back(blocks_[b].get());
    }
    // Filled blocks never change and never move: copy them without the lock.
    for (int64_t i = 0, first = from / kBlock; i < count;) {
        const int64_t at = from + i, in_block = at % kBlock, n = std::min(count - i, kBlock - in_block);
        std::memcpy(out + i, blocks[at / kBlock - first] + in_block, static_cast<size_t>(n) * sizeof(float));
        i += n;
    }
}

HiftSource::HiftSource(const ModelFile& mf) {
    sample_rate_ = static_cast<int>(mf.get_int("chatterbox.hift.sample_rate"));
    n_harm_ = static_cast<int>(mf.get_int("chatterbox.hift.nb_harmonics")) + 1;
    upsample_ = mf.get_int("chatterbox.hift.istft_hop");
    for (int64_t r : mf.get_int_array("chatterbox.hift.upsample_rates")) upsample_ *= r;
    sine_amp_ = static_cast<float>(mf.get_float("chatterbox.hift.nsf_alpha"));
    noise_std_ = static_cast<float>(mf.get_float("chatterbox.hift.nsf_sigma"));
    voiced_threshold_ = static_cast<float>(mf.get_float("chatterbox.hift.nsf_voiced_threshold"));
    merge_w_ = mf.read_f32(mf.tensor("hift.m_source.l_linear.weight"));
    merge_b_ = mf.read_f32(mf.tensor("hift.m_source.l_linear.bias")).at(0);
    if (static_cast<int>(merge_w_.size()) != n_harm_)
        throw EngineError(mf.path() + ": hift.m_source.l_linear does not match nb_harmonics");
}

HiftSourceState::HiftSourceState(int n_harmonics, uint64_t seed, int64_t lead_draws) : phase_sum(n_harmonics, 0.0) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(static_cast<float>(-M_PI), static_cast<float>(M_PI));
    for (int h = 0; h < n_harmonics; ++h) phases.push_back(uniform(rng));
    noise = std::make_shared<NoiseAhead>(rng, lead_draws);  // the same generator goes on with the noise
}

HiftSourceState HiftSource::state(uint64_t seed) const {
    return HiftSourceState(n_harm_, seed, static_cast<int64_t>(kLeadSeconds) * sample_rate_ * n_harm_);
}

void HiftSource::expect(const HiftSourceState& state, int64_t frames) const {
    if (frames > 0) state.noise->expect(state.next_draw + frames * upsample_ * n_harm_);
}

std::vector<float> HiftSource::excitation(const std::vector<float>& f0, const std::vector<float>& phases,
                                          const std::vector<float>& noise) const {
    const int64_t N = static_cast<int64_t>(f0.size()) * upsample_;
    if (static_cast<int>(phases.size()) != n_harm_ || static_cast<int64_t>(noise.size()) != n_harm_ * N)
        throw EngineError("excitation: phases must hold " + std::to_string(n_harm_) + " values and noise " +
                          std::to_string(n_harm_ * N));
    std::vector<double> phase_sum(n_harm_, 0.0);
    return excite(f0, phases, noise.data(), N, 1, phase_sum);
}

std::vector<float> HiftSource::excitation(const std::vector<float>& f0, HiftSourceState& state) const {
    if (static_cast<int>(state.phases.size()) != n_harm_) throw EngineError("excitation state of another model");
    const int64_t N = static_cast<int64_t>(f0.size()) * upsample_;
    // Sample-major draws (n * H + h), read by each piece for its own samples as it goes
    // (no copy of the whole utterance's noise first).
    NoiseAhead& noise = *state.noise;
    const int64_t first = state.next_draw;
    const int64_t H = n_harm_;
    auto read = [&noise, first, H](int64_t begin, int64_t end, float* out) {
        noise.read(first + begin * H, (end - begin) * H, out);
    };
    std::vector<float> out = excite(f0, state.phases, read, 1, n_harm_, state.phase_sum);
    state.next_draw += n_harm_ * N;
    return out;
}

std::vector<float> HiftSource::excite(const std::vector<float>& f0, const std::vector<float>& phases,
                                      const float* noise, int64_t h_stride, int64_t n_stride,
                                      std::vector<double>& acc) const {
    return excite(f0, phases, NoiseReader(), h_stride, n_stride, acc, noise);
}

std::vector<float> HiftSource::excite(const std::vector<float>& f0, const std::vector<float>& phases,
                                      const NoiseReader& read, int64_t h_stride, int64_t n_stride,
                                      std::vector<double>& acc, const float* given) const {
    const int64_t N = static_cast<int64_t>(f0.size()) * upsample_;
    std::vector<float> out(N);
    // Harmonic h's phase step in frame t: the same float expression as per sample, once a frame.
    auto steps_of = [&](float f, float* step) {
        for (int h = 0; h < n_harm_; ++h) step[h] = f * static_cast<float>(h + 1) / static_cast<float>(sample_rate_);
    };
    // Samples [begin, end) from the phase sums `sum` at `begin` (advanced to `end`).
    std::vector<float> phase(phases.begin(), phases.end());
    phase[0] = 0.0f;  // the fundamental's, as the reference forces it
    const int64_t ld = hiftk::round_up(upsample_, 8);  // a frame's samples, padded to whole vectors
    auto piece = [&](int64_t begin, int64_t end, std::vector<double>& sum) {
        constexpr int64_t kChunk = 4096;  // samples of noise read at a time (given == nullptr)
        std::vector<float> chunk(given ? 0 : static_cast<size_t>(kChunk * n_harm_)), step(n_harm_);
        std::vector<float> cum(static_cast<size_t>(n_harm_ * ld), 0.0f), noise(cum.size(), 0.0f), merged(ld);
        for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
            const int64_t c1 = std::min(end, c0 + kChunk);
            const float* nz;
            int64_t base;
            if (given) {
                nz = given;
                base = 0;
            } else {
                read(c0, c1, chunk.data());
                nz = chunk.data();
                base = c0;  // chunk holds draws of samples c0 .. c1
            }
            for (int64_t n = c0; n < c1;) {
                const int64_t t = n / upsample_, frame_end = std::min(c1, (t + 1) * upsample_);
                const float f = f0[t];  // nn.Upsample(mode="nearest")
                const bool voiced = f > voiced_threshold_;
                const float noise_amp = voiced ? noise_std_ : sine_amp_ / 3.0f;
                steps_of(f, step.data());
                const int64_t len = frame_end - n;
                for (int64_t i = 0; i < len; ++i)  // the phase sums in order (double), the noise gathered
                    for (int h = 0; h < n_harm_; ++h) {
                        sum[h] += step[h];
                        const float c = static_cast<float>(sum[h]);
                        cum[h * ld + i] = c - std::floor(c);  // torch.remainder(x, 1)
                        noise[h * ld + i] = nz[h * h_stride + (n + i - base) * n_stride];
                    }
                merge({cum.data(), noise.data(), phase.data(), merge_w_.data(), ld, hiftk::round_up(len, 8), n_harm_,
                       merge_b_, sine_amp_, noise_amp, voiced},
                      merged.data());
                for (int64_t i = 0; i < len; ++i) out[n + i] = std::tanh(merged[i]);
                n = frame_end;
            }
        }
    };
    // The sines dominate and each sample's are independent, but the phase sums are
    // sequential (double, added step by step as torch's cumsum does): add them up once,
    // keeping the sums where each thread's piece begins, then compute the pieces in
    // parallel. Each sample sees the same operations as in one pass: bit-identical.
    const int64_t kMinPiece = 16384;
    const int64_t P = std::max<int64_t>(1, std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()),
                                                             std::min<int64_t>(16, N / kMinPiece)));
    if (P == 1) {
        piece(0, N, acc);
        return out;
    }
    std::vector<std::vector<double>> starts;
    std::vector<float> step(n_harm_);
    for (int64_t p = 0, n = 0; p < P; ++p) {
        const int64_t begin = N * p / P;
        while (n < begin) {
            const int64_t t = n / upsample_, stop = std::min(begin, (t + 1) * upsample_);
            steps_of(f0[t], step.data());
            for (; n < stop; ++n)
                for (int h = 0; h < n_harm_; ++h) acc[h] += step[h];
        }
        starts.push_back(acc);
    }
    std::vector<std::thread> pool;
    for (int64_t p = 1; p < P; ++p) pool.emplace_back(piece, N * p / P, N * (p + 1) / P, std::ref(starts[p]));
    piece(0, N / P, starts[0]);
    for (std::thread& t : pool) t.join();
    acc = starts[P - 1];  // the last piece ended at N
    return out;
}

}  // namespace cbs
