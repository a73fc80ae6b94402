#include "watermark/resampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/errors.h"
#include "core/parallel_for.h"

namespace cbs {

namespace {

constexpr int kMaxRate = 1000000;

double bessel_i0(double x) {
    // Power series; at the Kaiser betas used here (< 20) it converges to double precision.
    double sum = 1.0, term = 1.0;
    const double q = 0.25 * x * x;
    for (int k = 1; k < 500; ++k) {
        term *= q / (static_cast<double>(k) * k);
        sum += term;
        if (term < 1e-17 * sum) break;
    }
    return sum;
}

double to_db(double ratio) { return 20.0 * std::log10(ratio); }

// libsoxr's model of where a filter of stop-band attenuation `att` dB is `drop` dB down,
// as a fraction of its transition band (its lsx_inv_f_resp).
double transition_point(double drop, double att) {
    const double phi = ((2.0517e-07 * att - 1.1303e-04) * att + .023154) * att + .55924;
    const double power = std::log(.5) / std::log(std::sin(phi * .5));
    const double lin = std::exp(drop * (std::log(10.0) * 0.05));
    const double s = lin > .5 ? 1 - lin : lin;
    const double x = std::asin(std::pow(s, 1 / power)) / phi;
    return lin > .5 ? x : 1 - x;
}

// libsoxr's Kaiser beta: polynomial fits in the attenuation, one per octave of the
// relative transition width, interpolated between octaves (its lsx_kaiser_beta).
double soxr_kaiser_beta(double att, double tr_bw) {
    static const double fits[][4] = {
        {-6.784957e-10, 1.02856e-05, 0.1087556, -0.8988365 + .001},
        {-6.897885e-10, 1.027433e-05, 0.10876, -0.8994658 + .002},
        {-1.000683e-09, 1.030092e-05, 0.1087677, -0.9007898 + .003},
        {-3.654474e-10, 1.040631e-05, 0.1087085, -0.8977766 + .006},
        {8.106988e-09, 6.983091e-06, 0.1091387, -0.9172048 + .015},
        {9.519571e-09, 7.272678e-06, 0.1090068, -0.9140768 + .025},
        {-5.626821e-09, 1.342186e-05, 0.1083999, -0.9065452 + .05},
        {-9.965946e-08, 5.073548e-05, 0.1040967, -0.7672778 + .085},
        {1.604808e-07, -5.856462e-05, 0.1185998, -1.34824 + .1},
        {-1.511964e-07, 6.363034e-05, 0.1064627, -0.9876665 + .18},
    };
    constexpr int n_fits = 10;
    if (att >= 60) {
        const double octave = std::log(tr_bw / .0005) / std::log(2.);
        const int i0 = std::clamp(static_cast<int>(octave), 0, n_fits - 1);
        const int i1 = std::clamp(1 + static_cast<int>(octave), 0, n_fits - 1);
        auto fit = [att](const double* c) { return ((c[0] * att + c[1]) * att + c[2]) * att + c[3]; };
        const double b0 = fit(fits[i0]), b1 = fit(fits[i1]);
        return b0 + (b1 - b0) * (octave - static_cast<int>(octave));
    }
    if (att > 50) return .1102 * (att - 8.7);
    if (att > 20.96) return .58417 * std::pow(att - 20.96, .4) + .07886 * (att - 20.96);
    return 0;
}

// libsoxr's single-phase low-pass design (lsx_design_lpf with one phase): pass-band end
// fp, stop-band start fs, both relative to nyquist fn; taps = 1 (mod `modulo`).
std::vector<double> soxr_lowpass(double fp, double fs, double fn, double att, int modulo) {
    fp /= fn, fs /= fn;
    const double tr_bw = std::min(.5 * (fs - fp), .5 * fs);
    const double fc = fs - tr_bw;
    const double beta = soxr_kaiser_beta(att, tr_bw * .5 / fc);
    const double width = ((.0007528358 - 1.577737e-05 * beta) * beta + .6248022) * beta + .06186902;
    int n = static_cast<int>(std::ceil(width / tr_bw + 1));
    n = (n + modulo - 2) / modulo * modulo + 1;
    const int m = n - 1;
    const double rho = .5, i0_beta = bessel_i0(beta);
    std::vector<double> h(n);
    for (int i = 0; i <= m / 2; ++i) {
        const double z = i - .5 * m, x = z * M_PI, y = z / (.5 * m + rho);
        const double sinc = x != 0 ? std::sin(fc * x) / x : fc;
        h[i] = h[m - i] = sinc * bessel_i0(beta * std::sqrt(1 - y * y)) / i0_beta;
    }
    return h;
}

// The rational (L, M) libsoxr's HQ recipe runs as one stage for input/output ratio
// `io`, or {0, 0} when it plans several stages (half-band or arbitrary-ratio ones).
// Follows its stage planner for 20-bit quality, no interpolation override.
std::pair<int, int> soxr_single_stage(double io) {
    constexpr double kMult32 = 65536. * 65536.;
    constexpr int kMode = 3;  // (ceil(20 bits) - 6) / 4
    const bool upsample = io < 1;
    double a = io;
    int halvings = 0;
    for (int i = static_cast<int>(.5 * a); i >>= 1;) a *= .5, ++halvings;
    const bool pre_m = upsample || (a > 1.5 && a < 2);
    const int post_m = 1 + (a > 1 && pre_m);
    a /= post_m;
    const int pre_l = 1 + (!pre_m && a < 2) + (upsample && kMode);
    a *= pre_l;
    const double frac = a - static_cast<int>(a);
    const double epsilon = frac != 0 ? std::fabs(std::floor(frac * kMult32 + .5) / (frac * kMult32) - 1) : 0;
    bool rational = frac == 0;
    int arb_l = 1;
    for (int i = 1; i <= 2048 && !rational; ++i) {
        const double d = frac * i;
        const int guess = static_cast<int>(d + .5);
        if ((rational = std::fabs(guess / d - 1) <= epsilon)) {
            if (guess == i) {
                a = std::ceil(a);
                const int x = a > 3;
                halvings += x;
                a /= 1 + x;
            } else {
                a = i * static_cast<int>(a) + guess, arb_l = i;
            }
        }
    }
    int L = pre_l * arb_l, M = static_cast<int>(a * post_m);
    if (((L | M) & 1) == 0) L >>= 1, M >>= 1;
    const double d = pre_l * arb_l / a;
    if (halvings > 0 || (d > 4 && d != 5)) return {0, 0};
    if (rational && (std::max(L, M) < 5 || L * M < 6)) return {L, M};
    return {0, 0};
}

void check_rates(int in_rate, int out_rate) {
    for (int r : {in_rate, out_rate})
        if (r < 1 || r > kMaxRate)
            throw ParameterError("sample rate must be between 1 and " + std::to_string(kMaxRate) + " Hz, got " +
                                 std::to_string(r));
}

}  // namespace

RationalResampler::RationalResampler(int in_rate, int out_rate, int L, int M, std::vector<double> h,
                                     bool soxr_length)
    : in_rate_(in_rate), out_rate_(out_rate), L_(L), M_(M), soxr_length_(soxr_length), h_(std::move(h)) {
    const int n = static_cast<int>(h_.size());
    centre_ = (n - 1) / 2;
    phase_len_ = (n + L_ - 1) / L_;
    phases_.assign(L_, std::vector<float>(phase_len_, 0.0f));
    for (int p = 0; p < L_; ++p) {
        const int taps_p = p < n ? (n - p + L_ - 1) / L_ : 0;
        for (int j = 0; j < taps_p; ++j) phases_[p][phase_len_ - 1 - j] = static_cast<float>(h_[p + L_ * j]);
    }
}

RationalResampler RationalResampler::soxr_hq(int in_rate, int out_rate) {
    check_rates(in_rate, out_rate);
    if (in_rate == out_rate) return RationalResampler(in_rate, out_rate, 1, 1, {1.0}, true);
    const auto [L, M] = soxr_single_stage(static_cast<double>(in_rate) / out_rate);
    if (L == 0)
        throw ParameterError("watermarking audio at " + std::to_string(in_rate) +
                             " Hz is not supported: libsoxr resamples " + std::to_string(in_rate) + " -> " +
                             std::to_string(out_rate) + " Hz in several stages (supported: 8000, 16000, "
                             "24000, 32000, 48000 Hz and the like); resample it first");
    constexpr double kBits = 20;  // SOXR_HQ
    const double rejection = kBits * to_db(2.0);
    const double passband_end = 1 - .05 / (1 - transition_point(-3., rejection));
    const double att = (kBits + 1) * to_db(2.0);
    const int fn = std::max(L, M);
    const bool power_of_two = (L & (L - 1)) == 0;
    std::vector<double> h = soxr_lowpass(passband_end, 1.0, fn, att, power_of_two && fn == L ? 2 * L : 4);
    for (double& v : h) v *= L;
    return RationalResampler(in_rate, out_rate, L, M, std::move(h), true);
}

RationalResampler RationalResampler::polyphase(int in_rate, int out_rate) {
    check_rates(in_rate, out_rate);
    const int g = std::gcd(in_rate, out_rate);
    const int up = out_rate / g, down = in_rate / g;
    if (up == 1 && down == 1) return RationalResampler(in_rate, out_rate, 1, 1, {1.0}, false);
    const int max_rate = std::max(up, down), half = 10 * max_rate, n = 2 * half + 1;
    constexpr double kBeta = 5.0;
    const double fc = 1.0 / max_rate, i0_beta = bessel_i0(kBeta);
    std::vector<double> h(n);
    double sum = 0;
    for (int i = 0; i < n; ++i) {
        const double m = i - half, x = fc * m;
        const double sinc = x == 0 ? 1.0 : std::sin(M_PI * x) / (M_PI * x);
        const double r = m / half;
        h[i] = fc * sinc * bessel_i0(kBeta * std::sqrt(std::max(0.0, 1 - r * r))) / i0_beta;
        sum += h[i];
    }
    // scipy rounds the unit-gain filter to the input's f32, then scales by `up` in f32.
    for (double& v : h) v = static_cast<double>(static_cast<float>(v / sum) * static_cast<float>(up));
    return RationalResampler(in_rate, out_rate, up, down, std::move(h), false);
}

int64_t RationalResampler::natural_length(int64_t n) const {
    if (soxr_length_) return static_cast<int64_t>(static_cast<double>(n) / (static_cast<double>(in_rate_) / out_rate_) + .5);
    const int64_t num = n * L_;
    return num / M_ + (num % M_ != 0);
}

int64_t RationalResampler::fixed_length(int64_t n) const {
    const double ratio = static_cast<double>(out_rate_) / in_rate_;
    return static_cast<int64_t>(std::ceil(static_cast<double>(n) * ratio));
}

std::vector<float> RationalResampler::process(const float* x, int64_t n, int threads) const {
    const int64_t n_out = fixed_length(n), n_calc = std::min(n_out, natural_length(n));
    std::vector<float> y(static_cast<size_t>(std::max<int64_t>(n_out, 0)), 0.0f);
    if (L_ == 1 && M_ == 1) {
        std::copy(x, x + std::min(n, n_out), y.begin());
        return y;
    }
    // x with phase_len_ zeros before and 2 phase_len_ after: every tap window is in range.
    const int64_t pad = phase_len_;
    std::vector<float> xp(static_cast<size_t>(n + 3 * pad), 0.0f);
    std::copy(x, x + n, xp.begin() + pad);
    auto run = [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
            const int64_t t = k * M_ + centre_;
            const float* h = phases_[static_cast<size_t>(t % L_)].data();
            // input index base - phase_len_ + 1 + q  ->  xp index base + 1 + q
            const float* xs = xp.data() + (t / L_) + 1;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int q = 0;
            for (; q + 8 <= phase_len_; q += 8)
                for (int l = 0; l < 8; ++l) acc[l] += h[q + l] * xs[q + l];
            float tail = 0;
            for (; q < phase_len_; ++q) tail += h[q] * xs[q];
            y[static_cast<size_t>(k)] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
        }
    };
    parallel_for(n_calc, threads, 4096, run);
    return y;
}

}  // namespace cbs
