#include "watermark/conv_stack.h"

#include <algorithm>

#include "core/parallel_for.h"

#ifdef CBS_HAVE_BLAS
#include <cblas.h>  // scipy-openblas32: every symbol carries a scipy_ prefix
#endif

namespace cbs {

namespace {

// y[t][o] (+)= sum_i a[t * lda + i] w[o * ldw + i] for t < T, o < n_out, i < n_in.
void product(const float* a, int64_t lda, const float* w, int64_t ldw, int n_out, int n_in, float* y, int64_t T,
             bool accumulate) {
#ifdef CBS_HAVE_BLAS
    scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), n_out, n_in, 1.0f, a,
                      static_cast<int>(lda), w, static_cast<int>(ldw), accumulate ? 1.0f : 0.0f, y, n_out);
#else
    for (int64_t t = 0; t < T; ++t) {
        const float* row = a + t * lda;
        float* out = y + t * n_out;
        for (int o = 0; o < n_out; ++o) {
            const float* wo = w + o * ldw;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int i = 0;
            for (; i + 8 <= n_in; i += 8)
                for (int l = 0; l < 8; ++l) acc[l] += row[i + l] * wo[i + l];
            float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (; i < n_in; ++i) s += row[i] * wo[i];
            out[o] = accumulate ? out[o] + s : s;
        }
    }
#endif
}

// Rows of AMX tiles a thread splits at a time (its share of the frames in blocks).
constexpr int64_t kAmxRows = 128;

// One layer over frames [t0, t1) of x_padded (pad frames of zeros on both sides).
void layer_rows(const Conv1dLayer& l, const AmxPackedB* packed, const float* x_padded, int64_t t0, int64_t t1, float* y,
                bool leaky, float slope) {
    const int64_t T = t1 - t0, window = static_cast<int64_t>(l.kernel) * l.c_in;
    if (T <= 0) return;
    if (packed) {
        thread_local AmxSplitA rows;
        for (int64_t r = t0; r < t1; r += kAmxRows) {
            const int64_t n = std::min(kAmxRows, t1 - r);
            rows.split(x_padded + r * l.c_in, l.c_in, n, window);
            amx_gemm(rows, *packed, y + r * l.c_out, l.c_out);
        }
    } else {
        for (int k = 0; k < l.kernel; ++k)
            product(x_padded + (t0 + k) * l.c_in, l.c_in, l.weight.data() + static_cast<int64_t>(k) * l.c_in, window,
                    l.c_out, l.c_in, y + t0 * l.c_out, T, k > 0);
    }
    for (int64_t t = t0; t < t1; ++t) {
        float* row = y + t * l.c_out;
        for (int o = 0; o < l.c_out; ++o) {
            const float v = row[o] + l.bias[o];
            row[o] = leaky && v < 0 ? v * slope : v;
        }
    }
}

}  // namespace

ConvStack::ConvStack(std::vector<Conv1dLayer> layers, float leaky_slope)
    : layers_(std::move(layers)), slope_(leaky_slope) {}

int64_t ConvStack::parameters() const {
    int64_t n = 0;
    for (const Conv1dLayer& l : layers_) n += static_cast<int64_t>(l.weight.size() + l.bias.size());
    return n;
}

int ConvStack::receptive_radius() const {
    int r = 0;
    for (const Conv1dLayer& l : layers_) r += (l.kernel - 1) / 2;
    return r;
}

std::vector<float> ConvStack::forward(const float* x, int64_t T, int threads, bool fast) const {
    const bool on_amx = fast && amx_available();
    if (on_amx)
        std::call_once(amx_->packed, [this] {
            amx_->layers.resize(layers_.size());
            for (size_t i = 0; i < layers_.size(); ++i) {
                const Conv1dLayer& l = layers_[i];
                const int64_t window = static_cast<int64_t>(l.kernel) * l.c_in;
                amx_->layers[i].pack(l.weight.data(), window, l.c_out, window);
            }
        });
#ifdef CBS_HAVE_BLAS
    // Our threads split the frames; OpenBLAS's own pool would oversubscribe the cores.
    static const bool one_thread = (scipy_openblas_set_num_threads(1), true);
    (void)one_thread;
#endif
    std::vector<float> cur(x, x + T * c_in()), padded, next;
    for (size_t li = 0; li < layers_.size(); ++li) {
        const Conv1dLayer& l = layers_[li];
        const int pad = (l.kernel - 1) / 2;
        padded.assign(static_cast<size_t>((T + 2 * pad) * l.c_in), 0.0f);
        std::copy(cur.begin(), cur.end(), padded.begin() + static_cast<int64_t>(pad) * l.c_in);
        next.assign(static_cast<size_t>(T * l.c_out), 0.0f);
        const bool leaky = li + 1 < layers_.size();
        parallel_for(T, threads, 16, [&](int64_t t0, int64_t t1) {
            layer_rows(l, on_amx ? &amx_->layers[li] : nullptr, padded.data(), t0, t1, next.data(), leaky, slope_);
        });
        cur.swap(next);
    }
    return cur;
}

}  // namespace cbs
