// HiFT's graph (signals ne [C, L], channel fastest) of the kernels in hift/kernels.h,
// and the two entry points f0() and decode().
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <string>

#include "core/system_info.h"
#include "hift/hift.h"
#include "hift/kernels.h"

namespace cbs {

using namespace hiftk;

// ---------------------------------------------------------------------------
// Graph pieces (signals are ne [C, L], channel fastest)
// ---------------------------------------------------------------------------

struct Hift::Graph {
    explicit Graph(ggml_context* c) : ctx(c) {}
    ggml_context* ctx;
    std::deque<ColsOp> cols_ops;  // kernel parameters, alive until the graph has run
    std::deque<RgemmOp> rgemm_ops;
    std::deque<AmxConvOp> amx_ops;
    std::deque<FinishOp> finish_ops;
    std::deque<UpOp> up_ops;
    std::deque<CgemmOp> cgemm_ops;
    std::deque<FftInOp> fft_in_ops;
    std::deque<FftOutOp> fft_out_ops;
    std::deque<WprepOp> wprep_ops;
    std::deque<FconvOp> fconv_ops;
    std::deque<Work> works;

    Work* work() { return &works.emplace_back(); }

    // Whether an FFT conv over L frames costs less as rgemm's direct products: for a short
    // signal (a stream's chunk, the first especially) the DFT's fixed cost, W_f made and read
    // for every bin (2 C^2 floats each, from the whole weight), outweighs its products. The bound
    // in frame-taps (L x K) is the best of those measured (docs/CPU_STAGES.md); CBS_HIFT_DIRECT
    // sets it (0: every such conv through the DFT).
    static bool direct_is_cheaper(const Conv& c, int64_t L) {
        static const int64_t max_frame_taps = [] {
            const char* v = std::getenv("CBS_HIFT_DIRECT");
            return v && *v ? std::atoll(v) : int64_t{6000};
        }();
        return L * c.K <= max_frame_taps;
    }

    // A B through rgemm: rows windows of kc floats of a, a_step apart; B in panels.
    ggml_tensor* rgemm(ggml_tensor* a, ggml_tensor* b, int64_t kc, int64_t a_step, int64_t rows) {
        rgemm_ops.push_back({kc, a_step, work()});
        ggml_tensor* args[2] = {a, b};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, ggml_nelements(b) / kc, rows, 1, 1, args, 2, rgemm_kernel,
                              GGML_N_TASKS_MAX, &rgemm_ops.back());
    }

    // A signal and the bias still to be added to it (by the op that reads it next).
    struct Sig {
        ggml_tensor* t;
        ggml_tensor* bias;
    };

    // A stride-1 conv of act(x.t + x.bias) on AMX tiles (c.amx) over out_len frames, `fin`
    // (bias, res, acc, div, post) in the same node when given, else with c's bias left pending.
    Sig amx_conv_block(const Conv& c, Sig x, Act act, const Snake* s, float slope, int64_t out_len,
                       const FinishOp* fin, ggml_tensor* res, ggml_tensor* acc) {
        ggml_tensor* args[7] = {x.t};
        int n = 1;
        if (x.bias) args[n++] = x.bias;
        if (act == Act::snake) {
            args[n++] = s->alpha;
            args[n++] = s->inv_alpha;
        }
        const int n_in = n;
        FinishOp f{};
        if (fin) {
            f = {true, res != nullptr, acc != nullptr, fin->div, fin->post, fin->slope, nullptr};
            args[n++] = c.b;
            if (res) args[n++] = res;
            if (acc) args[n++] = acc;
        }
        amx_ops.push_back({c.K, c.pad, c.dil, x.bias != nullptr, act, slope, c.amx, fin != nullptr, f, n_in, work()});
        ggml_tensor* y = ggml_custom_4d(ctx, GGML_TYPE_F32, c.cout, out_len, 1, 1, args, n, amx_conv_kernel,
                                        GGML_N_TASKS_MAX, &amx_ops.back());
        return {y, fin ? nullptr : c.b};
    }

    // act(x + pre_bias) convolved with c, without c's bias: ne [cout_pad, L_out].
    ggml_tensor* conv(const Conv& c, ggml_tensor* x, ggml_tensor* pre_bias = nullptr, Act act = Act::none,
                      const Snake* s = nullptr, float slope = 0.0f) {
        const int64_t out_len = (x->ne[1] + 2 * c.pad - int64_t(c.dil) * (c.K - 1) - 1) / c.stride + 1;
        if (out_len < 1) throw EngineError("HiFT input is too short for its convolutions");
        if (c.amx) return amx_conv_block(c, {x, pre_bias}, act, s, slope, out_len, nullptr, nullptr, nullptr).t;
        ggml_tensor* args[4] = {x};
        int n = 1;
        if (pre_bias) args[n++] = pre_bias;
        if (act == Act::snake) {
            args[n++] = s->alpha;
            args[n++] = s->inv_alpha;
        }
        if (c.panels && c.dil > 1) {  // an FFT conv's short signal: the dilated frames side by side
            const int64_t kc = int64_t{c.K} * c.cin;
            cols_ops.push_back({c.K, c.stride, c.pad, c.dil, pre_bias != nullptr, act, slope, work()});
            ggml_tensor* cols = ggml_custom_4d(ctx, GGML_TYPE_F32, kc, out_len, 1, 1, args, n, cols_kernel,
                                               GGML_N_TASKS_MAX, &cols_ops.back());
            return rgemm(cols, c.w, kc, kc, out_len);
        }
        if (c.panels) {
            // the activated signal, zero-padded, read by rgemm in overlapping windows
            const int64_t rows = (out_len - 1) * c.stride + c.K;
            cols_ops.push_back({1, 1, c.pad, 1, pre_bias != nullptr, act, slope, work()});
            ggml_tensor* xp = ggml_custom_4d(ctx, GGML_TYPE_F32, c.cin, rows, 1, 1, args, n, cols_kernel,
                                             GGML_N_TASKS_MAX, &cols_ops.back());
            return rgemm(xp, c.w, int64_t{c.K} * c.cin, int64_t{c.stride} * c.cin, out_len);
        }
        cols_ops.push_back({c.K, c.stride, c.pad, c.dil, pre_bias != nullptr, act, slope, work()});
        ggml_tensor* cols = ggml_custom_4d(ctx, GGML_TYPE_F32, c.w->ne[0], out_len, 1, 1, args, n, cols_kernel,
                                           GGML_N_TASKS_MAX, &cols_ops.back());
        return ggml_mul_mat(ctx, c.w, cols);
    }

    // A stride-1, dilation-1 conv without a columns buffer: frame t's columns are the K
    // frames from t - pad on, contiguous in the zero-padded signal, so that signal read
    // with a row step of one frame is the columns matrix (its rows overlap). Output time
    // fastest, ne [L rounded up to 4 (for the sgemm), cout_pad], without c's bias.
    ggml_tensor* conv_rows(const Conv& c, ggml_tensor* x) {
        const int64_t C = x->ne[0], L4 = round_up(x->ne[1], 4);
        cols_ops.push_back({1, 1, c.pad, 1, false, Act::none, 0.0f, work()});
        ggml_tensor* args[1] = {x};
        ggml_tensor* xp = ggml_custom_4d(ctx, GGML_TYPE_F32, C, L4 + c.K - 1, 1, 1, args, 1, cols_kernel,
                                         GGML_N_TASKS_MAX, &cols_ops.back());
        // ggml_view_2d refuses a view that reads memory twice, so the rows are widened
        // to K frames after the fact (nbytes then matches xp's exactly).
        ggml_tensor* cols = ggml_view_2d(ctx, xp, C, L4 + c.K - 1, xp->nb[1], 0);
        cols->ne[0] = int64_t{c.K} * C;
        cols->ne[1] = L4;
        cols->nb[2] = cols->nb[3] = cols->nb[1] * L4;
        return ggml_mul_mat(ctx, cols, c.w);
    }

    ggml_tensor* finish(ggml_tensor* y, ggml_tensor* b, ggml_tensor* res = nullptr, ggml_tensor* acc = nullptr,
                        float div = 1.0f, Act post = Act::none, float slope = 0.0f) {
        finish_ops.push_back({true, res != nullptr, acc != nullptr, div, post, slope, work()});
        ggml_tensor* args[4] = {y, b};
        int n = 2;
        if (res) args[n++] = res;
        if (acc) args[n++] = acc;
        return ggml_custom_4d(ctx, GGML_TYPE_F32, y->ne[0], y->ne[1], 1, 1, args, n, finish_kernel,
                              GGML_N_TASKS_MAX, &finish_ops.back());
    }

    // c(act(x.t + x.bias)), then `fin` (bias, res, acc, div, post) when given, else with
    // c's bias left pending.
    Sig conv_block(const Conv& c, Sig x, Act act, const Snake* s, const FinishOp* fin = nullptr,
                   ggml_tensor* res = nullptr, ggml_tensor* acc = nullptr) {
        if (c.amx) return amx_conv_block(c, x, act, s, 0.0f, x.t->ne[1], fin, res, acc);  // "same" padding
        if (!c.fft || direct_is_cheaper(c, x.t->ne[1])) {
            ggml_tensor* y = conv(c, x.t, x.bias, act, s);
            if (!fin) return {y, c.b};
            return {finish(y, c.b, res, acc, fin->div, fin->post, fin->slope), nullptr};
        }
        const int64_t C = c.cin, L = x.t->ne[1];
        const int N = c.fft->size(), n_bins = N / 2 + 1;
        const FftGeom geom{N, c.K, c.dil, L};
        FinishOp f = fin ? *fin : FinishOp{true, false, false, 1.0f, Act::none, 0.0f, nullptr};
        f.has_res = res != nullptr;
        f.has_acc = acc != nullptr;
        const FftInOp in_op{c.fft, c.K, c.dil, x.bias != nullptr, act, 0.0f, nullptr};
        ggml_tensor* args[10];
        int n = 0;
        args[n++] = x.t;
        if (x.bias) args[n++] = x.bias;
        if (act == Act::snake) {
            args[n++] = s->alpha;
            args[n++] = s->inv_alpha;
        }
        // One fused node when all bins' weights stay in L3 (C <= 128 for N = 64): the
        // spectra then never go through memory. With bigger C the signal is short and
        // the three nodes' spectra stay in L3 instead.
        constexpr int64_t fuse_max_bytes = 8 << 20;  // (fusing C = 256 too, 32 MB, is slower)
        if (int64_t{n_bins} * 2 * C * C * 4 <= fuse_max_bytes) {
            wprep_ops.push_back({c.fft, c.K, C, work()});
            ggml_tensor* wargs[1] = {c.w};
            ggml_tensor* W = ggml_custom_4d(ctx, GGML_TYPE_F32, 2 * C * C, n_bins, 1, 1, wargs, 1, wprep_kernel,
                                            GGML_N_TASKS_MAX, &wprep_ops.back());
            args[n++] = W;
            args[n++] = c.b;
            if (res) args[n++] = res;
            if (acc) args[n++] = acc;
            // Chunks of tiles (a multiple of 6, the AVX-512 product's step) whose spectra take
            // at most half of a core's L2: the bigger the chunk, the fewer times each bin's
            // weights come in from L3.
            const int64_t spec_bytes = int64_t{n_bins} * 2 * C * 4;
            const int64_t per_chunk = std::max<int64_t>(1, l2_cache_bytes() / 2 / spec_bytes / 6);
            fconv_ops.push_back({in_op, f, 6 * per_chunk, work()});
            return {ggml_custom_4d(ctx, GGML_TYPE_F32, C, L, 1, 1, args, n, fconv_kernel, GGML_N_TASKS_MAX,
                                   &fconv_ops.back()),
                    nullptr};
        }
        fft_in_ops.push_back(in_op);
        fft_in_ops.back().work = work();
        const int64_t n_chunks = (geom.tiles() + chunk_tiles(C) - 1) / chunk_tiles(C);
        ggml_tensor* X = ggml_custom_4d(ctx, GGML_TYPE_F32, spec_block(C), n_bins, n_chunks, 1, args, n,
                                        fft_in_kernel, GGML_N_TASKS_MAX, &fft_in_ops.back());
        cgemm_ops.push_back({c.fft, c.K, C, geom.tiles(), work()});
        ggml_tensor* gargs[2] = {X, c.w};
        ggml_tensor* Y = ggml_custom_4d(ctx, GGML_TYPE_F32, spec_block(C), n_bins, n_chunks, 1, gargs, 2,
                                        cgemm_kernel, GGML_N_TASKS_MAX, &cgemm_ops.back());
        fft_out_ops.push_back({c.fft, c.K, c.dil, f, work()});
        ggml_tensor* oargs[4] = {Y, c.b};
        n = 2;
        if (res) oargs[n++] = res;
        if (acc) oargs[n++] = acc;
        return {ggml_custom_4d(ctx, GGML_TYPE_F32, C, L, 1, 1, oargs, n, fft_out_kernel, GGML_N_TASKS_MAX,
                               &fft_out_ops.back()),
                nullptr};
    }

    // ResBlock(x) (Snake, conv1, Snake, conv2, + x per dilation); its last step also
    // does `acc + r`, the division by `div` and the activation `post`.
    ggml_tensor* resblock(const ResBlock& rb, ggml_tensor* x, ggml_tensor* acc = nullptr, float div = 1.0f,
                          Act post = Act::none, float slope = 0.0f) {
        const size_t n = rb.convs1.size();
        const FinishOp plain{true, false, false, 1.0f, Act::none, 0.0f, nullptr},
            last{true, false, false, div, post, slope, nullptr};
        for (size_t i = 0; i < n; ++i) {
            Sig h = conv_block(rb.convs1[i], {x, nullptr}, Act::snake, &rb.act1[i]);
            x = conv_block(rb.convs2[i], h, Act::snake, &rb.act2[i], i + 1 < n ? &plain : &last, x,
                           i + 1 < n ? nullptr : acc)
                    .t;
        }
        return x;
    }

    // ConvTranspose1d of x (already activated), optionally reflection-padded by one
    // frame in front, plus `add`.
    ggml_tensor* up(const Up& u, ggml_tensor* x, ggml_tensor* add, bool reflect_first) {
        ggml_tensor* cols;  // [K*Cout (to 16), L]
        if (u.amx) {  // one tap, no activation: x's frames are A's rows
            amx_ops.push_back({1, 0, 1, false, Act::none, 0.0f, u.amx, false, {}, 1, work()});
            cols = ggml_custom_4d(ctx, GGML_TYPE_F32, u.amx->rows(), x->ne[1], 1, 1, &x, 1, amx_conv_kernel,
                                  GGML_N_TASKS_MAX, &amx_ops.back());
        } else {
            cols = rgemm(x, u.wt, x->ne[0], x->ne[0], x->ne[1]);
        }
        const int64_t T = (x->ne[1] - 1) * u.stride + u.K - 2 * u.pad + (reflect_first ? 1 : 0);
        if (add->ne[0] != u.cout || add->ne[1] != T)
            throw EngineError("HiFT source branch length " + std::to_string(add->ne[1]) + " != " + std::to_string(T) +
                              " (metadata inconsistent with the weights)");
        if (reflect_first && T < 3) throw EngineError("HiFT input is too short for the reflection padding");
        up_ops.push_back({u.K, u.stride, u.pad, reflect_first, work()});
        ggml_tensor* args[3] = {cols, u.b, add};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, u.cout, T, 1, 1, args, 3, up_kernel, GGML_N_TASKS_MAX,
                              &up_ops.back());
    }
};

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------


// mel [C][T] row-major -> [T][C] (ne [C, T], channel fastest).
static std::vector<float> channel_fastest(const float* mel, int64_t C, int64_t T) {
    std::vector<float> out(static_cast<size_t>(C * T));
    for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < T; ++t) out[t * C + c] = mel[c * T + t];
    return out;
}

std::vector<float> Hift::f0(const float* mel, int64_t T) {
    hp_.check_mel(T);
    Graph g(runner_.begin());
    GraphInputs inputs;
    ggml_tensor* x = inputs.f32(g.ctx, channel_fastest(mel, hp_.in_channels, T), hp_.in_channels, T);
    // condnet: Conv1d, ELU, ...: each ELU (with the previous bias) is applied by the next conv.
    for (size_t i = 0; i < f0_convs_.size(); ++i)
        x = i == 0 ? g.conv(f0_convs_[i], x) : g.conv(f0_convs_[i], x, f0_convs_[i - 1].b, Act::elu);
    x = g.finish(x, f0_convs_.back().b, nullptr, nullptr, 1.0f, Act::elu);
    // classifier: Linear(cond_channels, 1) over every frame, then abs.
    x = ggml_mul_mat(g.ctx, ggml_reshape_2d(g.ctx, f0_cls_w_, f0_cls_w_->ne[0], 1), x);  // [1, T]
    x = ggml_abs(g.ctx, ggml_add(g.ctx, x, f0_cls_b_));
    return runner_.compute(x, inputs);
}

std::vector<float> Hift::decode(const float* mel, int64_t T, const float* source, int64_t n_source) {
    hp_.check_decode(T, n_source);
    const int n_fft = hp_.n_fft;
    // _stft: the source's real then imaginary parts as n_fft + 2 channels.
    const int64_t n_frames = stft_.frames(n_source);
    std::vector<float> s_stft = stft_.forward(source, n_source);  // ne [n_fft + 2, n_frames]

    Graph g(runner_.begin());
    GraphInputs inputs;
    ggml_tensor* in = inputs.f32(g.ctx, channel_fastest(mel, hp_.in_channels, T), hp_.in_channels, T);
    ggml_tensor* s_in = inputs.f32(g.ctx, std::move(s_stft), n_fft + 2, n_frames);

    const size_t n_up = ups_.size(), n_k = hp_.resblock_kernel_sizes.size();
    // Every stage's input is only read through F.leaky_relu(x, lrelu_slope): done by
    // the op that makes it.
    ggml_tensor* x = g.finish(g.conv(conv_pre_, in), conv_pre_.b, nullptr, nullptr, 1.0f, Act::leaky, hp_.lrelu_slope);
    for (size_t i = 0; i < n_up; ++i) {
        ggml_tensor* si = g.finish(g.conv(source_downs_[i], s_in), source_downs_[i].b);
        si = g.resblock(source_resblocks_[i], si);
        // ups[i], ReflectionPad1d((1, 0)) after the last one, + source branch.
        x = g.up(ups_[i], x, si, i == n_up - 1);
        // mean of the resblocks, then the next stage's leaky ReLU (torch's default slope
        // 0.01 before conv_post, not lrelu_slope).
        const float slope = i + 1 < n_up ? hp_.lrelu_slope : 0.01f;
        ggml_tensor* xs = nullptr;
        for (size_t j = 0; j < n_k; ++j)
            xs = j + 1 < n_k ? g.resblock(resblocks_[i * n_k + j], x, xs)
                             : g.resblock(resblocks_[i * n_k + j], x, xs, static_cast<float>(n_k), Act::leaky, slope);
        x = xs;
    }
    if (x->ne[1] != n_frames)
        throw EngineError("HiFT output frames disagree with the source STFT (metadata inconsistent)");
    // conv_post, time fastest: spec[k * spec_len + m] (+ bias) is channel k of frame m.
    x = g.conv_rows(conv_post_, x);
    const int64_t spec_len = x->ne[0];
    std::vector<float> spec = runner_.compute(x, inputs);

    // _istft, then the clamp to audio_limit.
    std::vector<float> wav = stft_.inverse(spec, spec_len, post_bias_, n_frames, hp_.audio_limit);
    return wav;
}

}  // namespace cbs
