#include "watermark/perth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "core/errors.h"
#include "ggml.h"
#include "gguf.h"

namespace cbs {

namespace {

constexpr const char* kArch = "perth";
constexpr const char* kBranches[3] = {"slow", "normal", "fast"};

// The GGUF file with its tensor data in host memory (the model is a few tens of MB).
struct PerthFile {
    std::string path;
    gguf_context* gguf = nullptr;
    ggml_context* ctx = nullptr;

    explicit PerthFile(const std::string& p) : path(p) {
        FILE* f = std::fopen(p.c_str(), "rb");
        if (!f) throw ModelError(p + ": watermark model not found or not readable");
        char magic[4] = {};
        const size_t got = std::fread(magic, 1, 4, f);
        std::fclose(f);
        if (got != 4 || std::memcmp(magic, "GGUF", 4) != 0) throw ModelError(p + ": not a GGUF file");
        gguf = gguf_init_from_file(p.c_str(), gguf_init_params{/*no_alloc=*/false, &ctx});
        if (!gguf) throw ModelError(p + ": corrupt or truncated GGUF file");
        if (text("general.architecture") != kArch) {
            release();
            throw ModelError(p + ": not a Perth watermark model (general.architecture is not 'perth')");
        }
    }
    ~PerthFile() { release(); }
    PerthFile(const PerthFile&) = delete;
    PerthFile& operator=(const PerthFile&) = delete;

    void release() {
        if (ctx) ggml_free(ctx), ctx = nullptr;
        if (gguf) gguf_free(gguf), gguf = nullptr;
    }

    int64_t key(const std::string& k) const {
        const int64_t id = gguf_find_key(gguf, k.c_str());
        if (id < 0) throw ModelError(path + ": metadata key '" + k + "' is missing");
        return id;
    }
    std::string text(const std::string& k) const {
        const int64_t id = gguf_find_key(gguf, k.c_str());
        if (id < 0 || gguf_get_kv_type(gguf, id) != GGUF_TYPE_STRING) return "";
        return gguf_get_val_str(gguf, id);
    }
    int64_t integer(const std::string& k) const {
        const int64_t id = key(k);
        switch (gguf_get_kv_type(gguf, id)) {
            case GGUF_TYPE_INT32: return gguf_get_val_i32(gguf, id);
            case GGUF_TYPE_UINT32: return gguf_get_val_u32(gguf, id);
            case GGUF_TYPE_INT64: return gguf_get_val_i64(gguf, id);
            default: throw ModelError(path + ": metadata '" + k + "' is not an integer");
        }
    }
    double real(const std::string& k) const {
        const int64_t id = key(k);
        switch (gguf_get_kv_type(gguf, id)) {
            case GGUF_TYPE_FLOAT32: return gguf_get_val_f32(gguf, id);
            case GGUF_TYPE_FLOAT64: return gguf_get_val_f64(gguf, id);
            default: throw ModelError(path + ": metadata '" + k + "' is not a number");
        }
    }
    std::vector<double> reals(const std::string& k) const {
        const int64_t id = key(k);
        if (gguf_get_kv_type(gguf, id) != GGUF_TYPE_ARRAY || gguf_get_arr_type(gguf, id) != GGUF_TYPE_FLOAT32)
            throw ModelError(path + ": metadata '" + k + "' is not an array of float32");
        const auto* v = static_cast<const float*>(gguf_get_arr_data(gguf, id));
        return std::vector<double>(v, v + gguf_get_arr_n(gguf, id));
    }
    const ggml_tensor* find(const std::string& name) const { return ggml_get_tensor(ctx, name.c_str()); }
    // An f32 tensor of numpy shape `shape` (outermost first), as a vector.
    std::vector<float> tensor(const std::string& name, const std::vector<int64_t>& shape) const {
        const ggml_tensor* t = find(name);
        if (!t) throw ModelError(path + ": tensor '" + name + "' is missing");
        if (t->type != GGML_TYPE_F32) throw ModelError(path + ": tensor '" + name + "' is not f32");
        std::vector<int64_t> found;
        for (int i = ggml_n_dims(t) - 1; i >= 0; --i) found.push_back(t->ne[i]);
        if (found != shape) {
            auto str = [](const std::vector<int64_t>& s) {
                std::string out = "(";
                for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
                return out + ")";
            };
            throw ModelError(path + ": tensor '" + name + "' has shape " + str(found) + ", expected " + str(shape));
        }
        const auto* d = static_cast<const float*>(t->data);
        return std::vector<float>(d, d + ggml_nelements(t));
    }
};

// Layers `prefix`.0, .1, ... (PyTorch Conv1d weights [c_out, c_in, k]) from c_in to c_out.
ConvStack load_stack(const PerthFile& f, const std::string& prefix, int c_in, int c_out, float slope) {
    std::vector<Conv1dLayer> layers;
    int in = c_in;
    for (int i = 0;; ++i) {
        const std::string base = prefix + "." + std::to_string(i);
        const ggml_tensor* w = f.find(base + ".weight");
        if (!w) break;
        if (ggml_n_dims(w) > 3) throw ModelError(f.path + ": tensor '" + base + ".weight' is not a Conv1d weight");
        Conv1dLayer l;
        l.kernel = static_cast<int>(w->ne[0]);
        l.c_in = in;
        l.c_out = static_cast<int>(w->ne[2]);
        if (l.kernel % 2 == 0 || l.c_out < 1)
            throw ModelError(f.path + ": tensor '" + base + ".weight' has an even kernel or no outputs");
        const std::vector<float> torch = f.tensor(base + ".weight", {l.c_out, l.c_in, l.kernel});
        l.weight.resize(torch.size());
        for (int o = 0; o < l.c_out; ++o)
            for (int c = 0; c < l.c_in; ++c)
                for (int k = 0; k < l.kernel; ++k)
                    l.weight[(static_cast<size_t>(o) * l.kernel + k) * l.c_in + c] =
                        torch[(static_cast<size_t>(o) * l.c_in + c) * l.kernel + k];
        l.bias = f.tensor(base + ".bias", {l.c_out});
        in = l.c_out;
        layers.push_back(std::move(l));
    }
    if (layers.empty()) throw ModelError(f.path + ": no layers '" + prefix + ".0.weight'");
    if (in != c_out)
        throw ModelError(f.path + ": " + prefix + " ends with " + std::to_string(in) + " channels, expected " +
                         std::to_string(c_out));
    return ConvStack(std::move(layers), slope);
}

// F.interpolate(x [T][C] over time, size=out, mode="linear", align_corners=True) in f32.
std::vector<float> stretch_linear(const float* x, int64_t T, int C, int64_t out) {
    std::vector<float> y(static_cast<size_t>(out * C));
    const float scale = out > 1 ? static_cast<float>(T - 1) / static_cast<float>(out - 1) : 0.0f;
    for (int64_t j = 0; j < out; ++j) {
        const float real = scale * static_cast<float>(j);
        const int64_t i0 = static_cast<int64_t>(real);
        const float l1 = std::clamp(real - static_cast<float>(i0), 0.0f, 1.0f), l0 = 1.0f - l1;
        const int64_t i1 = i0 + (i0 < T - 1 ? 1 : 0);
        const float* a = x + i0 * C;
        const float* b = x + i1 * C;
        float* o = y.data() + j * C;
        for (int c = 0; c < C; ++c) o[c] = l0 * a[c] + l1 * b[c];
    }
    return y;
}

// F.interpolate(mask [T], size=out, mode="nearest") as PyTorch's CPU kernel indexes it.
std::vector<float> stretch_nearest(const std::vector<float>& m, int64_t out) {
    const int64_t T = static_cast<int64_t>(m.size());
    std::vector<float> y(static_cast<size_t>(out));
    const float scale = static_cast<float>(T) / static_cast<float>(out);
    for (int64_t j = 0; j < out; ++j) {
        int64_t src = out == T ? j : out == 2 * T ? (j >> 1)
                                   : std::min(static_cast<int64_t>(std::floor(static_cast<float>(j) * scale)), T - 1);
        y[j] = m[src];
    }
    return y;
}

}  // namespace

Perth::Perth(const std::string& path) {
    const PerthFile f(path);
    hp_.sample_rate = static_cast<int>(f.integer("perth.sample_rate"));
    hp_.n_fft = static_cast<int>(f.integer("perth.n_fft"));
    hp_.hop = static_cast<int>(f.integer("perth.hop_size"));
    hp_.n_bins = hp_.n_fft / 2 + 1;
    hp_.subband = static_cast<int>(f.integer("perth.subband"));
    hp_.hidden = static_cast<int>(f.integer("perth.hidden_size"));
    hp_.mag_min = f.real("perth.stft_magnitude_min");
    hp_.headroom_db = f.real("perth.headroom_db");
    hp_.mask_fraction = f.real("perth.mask_fraction");
    hp_.leaky_slope = f.real("perth.leaky_relu_slope");
    hp_.max_db_exponent = f.real("perth.max_db_exponent");
    const std::vector<double> rates = f.reals("perth.decoder_rates");
    if (hp_.sample_rate < 1000 || hp_.n_fft < 16 || hp_.n_fft % 2 != 0 || hp_.hop < 1 || hp_.hop > hp_.n_fft ||
        hp_.subband < 1 || hp_.subband > hp_.n_bins || !(hp_.mag_min > 0) || rates.size() != 3 ||
        !(rates[0] > 0 && rates[1] > 0 && rates[2] > 0))
        throw ModelError(path + ": inconsistent Perth hyper-parameters");
    std::copy(rates.begin(), rates.end(), hp_.decoder_rates.begin());
    stft_ = PerthStft(hp_.n_fft, hp_.hop, f.tensor("stft.window", {hp_.n_fft}));
    const float slope = static_cast<float>(hp_.leaky_slope);
    encoder_ = load_stack(f, "encoder", hp_.subband, hp_.subband, slope);
    for (int b = 0; b < 3; ++b)
        decoder_[b] = load_stack(f, std::string("decoder.") + kBranches[b], hp_.subband, 2, slope);
}

int64_t Perth::parameters() const {
    return encoder_.parameters() + decoder_[0].parameters() + decoder_[1].parameters() + decoder_[2].parameters();
}

void Perth::check_input(const float* x, int64_t n) const {
    if (n <= 0) throw ParameterError("the audio is empty");
    if (n < min_length())
        throw ParameterError("the audio is too short for the watermark: " + std::to_string(n) + " samples at " +
                             std::to_string(hp_.sample_rate) + " Hz, at least " + std::to_string(min_length()) +
                             " needed");
    for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(x[i])) throw ParameterError("the audio holds NaN or infinite samples");
}

void Perth::magnitudes(const Spectrogram& s, int64_t n, PerthWindow* window, std::vector<float>& mag,
                       std::vector<float>& mask) const {
    const int F = s.n_bins;
    const double min_db = 20.0 * std::log10(static_cast<double>(static_cast<float>(hp_.mag_min)));
    const double range = -min_db + hp_.headroom_db;
    const float floor = static_cast<float>(hp_.mag_min);
    mag.resize(s.re.size());
    std::vector<double> sums(s.frames);
    for (int64_t t = 0; t < s.frames; ++t) {
        double sum = 0;
        for (int f = 0; f < F; ++f) {
            const size_t i = static_cast<size_t>(t * F + f);
            const float a = std::max(static_cast<float>(std::hypot(static_cast<double>(s.re[i]), s.im[i])), floor);
            mag[i] = static_cast<float>((20.0 * std::log10(static_cast<double>(a)) - min_db) / range);
            sum += mag[i];
        }
        sums[t] = static_cast<float>(sum);
    }
    const PerthWindow whole;
    const PerthWindow& w = window ? *window : whole;
    const int64_t half = hp_.n_fft / 2;
    double loudest = w.loudest;
    for (int64_t t = 0; t < s.frames; ++t) {
        const bool inside_start = w.clip_start || t * hp_.hop >= half;
        const bool inside_end = w.clip_end || t * hp_.hop + half <= n;
        if (inside_start && inside_end) loudest = std::max(loudest, sums[t]);
    }
    if (window) window->loudest = loudest;
    const double threshold = static_cast<float>(loudest * hp_.mask_fraction);
    mask.resize(s.frames);
    for (int64_t t = 0; t < s.frames; ++t) mask[t] = sums[t] > threshold ? 1.0f : 0.0f;
}

std::vector<float> Perth::apply(const float* x, int64_t n, int threads, PerthWindow* window) const {
    check_input(x, n);
    const int F = hp_.n_bins, S = hp_.subband;
    Spectrogram spec = stft_.forward(x, n, threads);
    std::vector<float> mag, mask;
    magnitudes(spec, n, window, mag, mask);
    const int64_t T = spec.frames;
    std::vector<float> low(static_cast<size_t>(T * S));
    for (int64_t t = 0; t < T; ++t) std::copy_n(mag.data() + t * F, S, low.data() + t * S);
    const std::vector<float> residual = encoder_.forward(low.data(), T, threads);

    // Back to linear magnitudes with the original phase: a bin the encoder left alone keeps
    // its value (floored at mag_min, as the dB round trip does); an edited one takes
    // 10^(dB / 20) of its new normalised magnitude.
    const float range = static_cast<float>(-20.0 * std::log10(static_cast<double>(static_cast<float>(hp_.mag_min))) +
                                           hp_.headroom_db);
    const float min_db = static_cast<float>(20.0 * std::log10(static_cast<double>(static_cast<float>(hp_.mag_min))));
    const double floor = static_cast<float>(hp_.mag_min);
    for (int64_t t = 0; t < T; ++t)
        for (int f = 0; f < F; ++f) {
            const size_t i = static_cast<size_t>(t * F + f);
            const double re = spec.re[i], im = spec.im[i], a = std::hypot(re, im);
            const double ur = a > 0 ? re / a : 1.0, ui = a > 0 ? im / a : 0.0;
            double lin;
            if (f < S && mask[t] != 0.0f) {
                const float m = mag[i] + residual[static_cast<size_t>(t * S + f)] * mask[t];
                const float db = m * range + min_db;
                lin = std::pow(10.0, std::min(static_cast<double>(db) / 20.0, hp_.max_db_exponent));
            } else {
                lin = std::max(static_cast<double>(static_cast<float>(a)), floor);
            }
            spec.re[i] = static_cast<float>(lin * ur);
            spec.im[i] = static_cast<float>(lin * ui);
        }
    return stft_.inverse(spec, threads);
}

PerthDecoding Perth::decode(const float* x, int64_t n, int threads, bool fast) const {
    check_input(x, n);
    const int F = hp_.n_bins, S = hp_.subband;
    const Spectrogram spec = stft_.forward(x, n, threads);
    std::vector<float> mag, mask;
    magnitudes(spec, n, nullptr, mag, mask);
    const int64_t T = spec.frames;
    std::vector<float> low(static_cast<size_t>(T * S));
    for (int64_t t = 0; t < T; ++t) std::copy_n(mag.data() + t * F, S, low.data() + t * S);

    PerthDecoding out;
    std::array<double, 3> attention{}, marks{};
    for (int b = 0; b < 3; ++b) {
        PerthBranch& br = out.branches[b];
        const double rate = hp_.decoder_rates[b];
        br.frames = rate == 1.0 ? T : static_cast<int64_t>(static_cast<double>(T) * rate);
        if (br.frames < 1) throw ParameterError("the audio is too short for the watermark detector");
        const std::vector<float> in = br.frames == T ? low : stretch_linear(low.data(), T, S, br.frames);
        const std::vector<float> y = decoder_[b].forward(in.data(), br.frames, threads, fast);  // [frames][2]
        br.mask = stretch_nearest(mask, br.frames);
        br.attention.resize(br.frames);
        br.mark.resize(br.frames);
        double sa = 0, sm = 0, sw = 0;
        for (int64_t t = 0; t < br.frames; ++t) {
            br.attention[t] = y[t * 2];
            br.mark[t] = y[t * 2 + 1];
            sa += static_cast<double>(br.attention[t]) * br.mask[t];
            sm += static_cast<double>(br.mark[t]) * br.mask[t];
            sw += br.mask[t];
        }
        // 0 / 0 (no frame above the mask's threshold: digital silence) is NaN, as in PyTorch.
        br.attention_mean = static_cast<float>(sw > 0 ? sa / sw : std::numeric_limits<double>::quiet_NaN());
        br.mark_mean = static_cast<float>(sw > 0 ? sm / sw : std::numeric_limits<double>::quiet_NaN());
        attention[b] = br.attention_mean;
        marks[b] = br.mark_mean;
    }
    const double top = std::max({attention[0], attention[1], attention[2]});
    double z = 0, score = 0;
    for (int b = 0; b < 3; ++b) z += std::exp(attention[b] - top);
    for (int b = 0; b < 3; ++b) score += std::exp(attention[b] - top) / z * marks[b];
    out.score = std::isnan(score) ? static_cast<float>(score) : std::clamp(static_cast<float>(score), 0.0f, 1.0f);
    return out;
}

}  // namespace cbs
