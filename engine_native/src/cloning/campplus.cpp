#include "cloning/campplus.h"

#include <algorithm>
#include <string>

#include "core/graph_helpers.h"

namespace cbs {

namespace {

// Architecture constants that the reference CAMPPlus class hard-codes (they are not
// weights, so the tensor shapes cannot tell them); a model file may override them.
constexpr int kSegLen = 100;                    // CAMLayer.seg_pooling(seg_len=100)
constexpr int kTdnnStride = 2;                  // xvector.tdnn: Conv1d(..., 5, stride=2)
constexpr int kHeadOutStride = 2;               // FCM.conv2: stride=(2, 1)
const std::vector<int64_t> kDilations = {1, 2, 2};  // dense blocks 1..3

// Frequency size after a kernel-3 (padding 1) or kernel-1 (padding 0) conv with `stride`.
int conv_out(int n, int k, int stride) { return (n + 2 * ((k - 1) / 2) - k) / stride + 1; }

// Folded BatchNorm over the channel dimension `dim` of x (0: [C, T]; 2: [T, F, C]).
ggml_tensor* bn_apply(ggml_context* ctx, ggml_tensor* x, ggml_tensor* scale, ggml_tensor* shift, int dim) {
    if (dim == 2) {
        scale = ggml_reshape_3d(ctx, scale, 1, 1, scale->ne[0]);
        shift = ggml_reshape_3d(ctx, shift, 1, 1, shift->ne[0]);
    }
    return ggml_add(ctx, ggml_mul(ctx, x, scale), shift);
}

// 2-D convolution in f32 (ggml_conv_2d rounds through an f16 im2col), padding (k-1)/2:
// x ne [T, F, C_in], w ne [KW, KH, C_in, C_out] (PyTorch (out, in, kh, kw)) -> [T', F', C_out].
// stride_f applies to F (PyTorch's H), the time axis keeps stride 1.
ggml_tensor* conv2d(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, int stride_f) {
    ggml_tensor* cols = ggml_im2col(ctx, w, x, 1, stride_f, (w->ne[0] - 1) / 2, (w->ne[1] - 1) / 2, 1, 1, true,
                                    GGML_TYPE_F32);  // [KW*KH*C_in, T', F']
    ggml_tensor* y = ggml_mul_mat(ctx, ggml_reshape_2d(ctx, cols, cols->ne[0], cols->ne[1] * cols->ne[2]),
                                  ggml_reshape_2d(ctx, w, w->ne[0] * w->ne[1] * w->ne[2], w->ne[3]));  // [T'*F', C_out]
    return ggml_reshape_3d(ctx, y, cols->ne[1], cols->ne[2], w->ne[3]);
}

// A kernel-1 Conv1d weight ne [1, C_in, C_out] as a matrix for x [C_in, T].
ggml_tensor* pointwise(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x) {
    return ggml_mul_mat(ctx, ggml_reshape_2d(ctx, w, w->ne[1], w->ne[2]), x);
}

}  // namespace

CampPlus::CampPlus(const ModelFile& mf, ggml_backend_t backend) : fbank_(mf), runner_(backend) {
    auto opt_int = [&](const std::string& k, int def) {
        return mf.has_key("chatterbox.campplus." + k) ? static_cast<int>(mf.get_int("chatterbox.campplus." + k)) : def;
    };
    const std::string p = "campplus.";
    auto t = [&](const std::string& n) { return mf.tensor(p + n); };
    auto ts = [&](const std::string& n, std::vector<int64_t> ne) { return mf.tensor(p + n, ne); };
    auto bn = [&](const std::string& n, int64_t c = -1) {
        ggml_tensor* scale = ts(n + ".scale", {c});
        return Bn{scale, ts(n + ".shift", {scale->ne[0]})};
    };
    const std::string bad = mf.path() + ": CAMPPlus weights do not fit together (";

    n_mels_ = fbank_.n_mels();
    seg_len_ = opt_int("seg_len", kSegLen);
    tdnn_stride_ = opt_int("tdnn_stride", kTdnnStride);
    head_out_stride_ = opt_int("head_out_stride", kHeadOutStride);
    const std::vector<int64_t> dilations = mf.has_key("chatterbox.campplus.block_dilations")
                                               ? mf.get_int_array("chatterbox.campplus.block_dilations")
                                               : kDilations;

    // FCM head: conv1, residual layers layer{i}.{j}, conv2. In FCM every block has as many
    // input as output planes, so a block has a shortcut conv exactly when it strides.
    head_conv1_ = t("head.conv1.weight");
    head_bn1_ = bn("head.bn1");
    int freq = conv_out(n_mels_, static_cast<int>(head_conv1_->ne[1]), 1);
    for (int i = 1; mf.find_tensor(p + "head.layer" + std::to_string(i) + ".0.conv1.weight"); ++i) {
        for (int j = 0;; ++j) {
            const std::string b = "head.layer" + std::to_string(i) + "." + std::to_string(j) + ".";
            if (!mf.find_tensor(p + b + "conv1.weight")) break;
            ResBlock r{t(b + "conv1.weight"), t(b + "conv2.weight"), mf.find_tensor(p + b + "shortcut.0.weight"),
                       bn(b + "bn1"), bn(b + "bn2"), {}, 1};
            if (r.sc_conv) {
                r.sc_bn = bn(b + "shortcut.1");
                r.stride = 2;
            }
            freq = conv_out(freq, static_cast<int>(r.conv1->ne[1]), r.stride);
            head_blocks_.push_back(r);
        }
    }
    head_conv2_ = t("head.conv2.weight");
    head_bn2_ = bn("head.bn2");
    freq = conv_out(freq, static_cast<int>(head_conv2_->ne[1]), head_out_stride_);

    tdnn_w_ = ts("xvector.tdnn.linear.weight", {-1, head_conv2_->ne[3] * freq, -1});  // ne [K, C_head * F', C]
    tdnn_bn_ = bn("xvector.tdnn.nonlinear.batchnorm", tdnn_w_->ne[2]);
    tdnn_pad_ = static_cast<int>((tdnn_w_->ne[0] - 1) / 2);
    if (tdnn_w_->ne[1] != head_conv2_->ne[3] * freq)
        throw ModelError(bad + "head output " + std::to_string(head_conv2_->ne[3] * freq) + " channels, TDNN input " +
                          std::to_string(tdnn_w_->ne[1]) + ")");
    int64_t channels = tdnn_w_->ne[2];

    for (int b = 1; mf.find_tensor(p + "xvector.block" + std::to_string(b) + ".tdnnd1.linear1.weight"); ++b) {
        if (b > static_cast<int>(dilations.size())) throw ModelError(bad + "more dense blocks than dilations)");
        Block blk;
        blk.dilation = static_cast<int>(dilations[b - 1]);
        const std::string bp = "xvector.block" + std::to_string(b) + ".";
        for (int l = 1;; ++l) {
            const std::string lp = bp + "tdnnd" + std::to_string(l) + ".";
            if (!mf.find_tensor(p + lp + "linear1.weight")) break;
            ggml_tensor* lin1 = ts(lp + "linear1.weight", {1, channels, -1});
            const int64_t mid = lin1->ne[2];
            ggml_tensor* local = ts(lp + "cam_layer.linear_local.weight", {-1, mid, -1});
            ggml_tensor* cam1 = ts(lp + "cam_layer.linear1.weight", {1, mid, -1});
            DenseLayer d{bn(lp + "nonlinear1.batchnorm", channels), bn(lp + "nonlinear2.batchnorm", mid), lin1, local,
                         cam1, ts(lp + "cam_layer.linear1.bias", {cam1->ne[2]}),
                         ts(lp + "cam_layer.linear2.weight", {1, cam1->ne[2], local->ne[2]}),
                         ts(lp + "cam_layer.linear2.bias", {local->ne[2]})};
            if (d.lin1->ne[1] != channels || d.local->ne[0] % 2 != 1)
                throw ModelError(bad + lp + "linear1 expects " + std::to_string(d.lin1->ne[1]) + " channels, has " +
                                  std::to_string(channels) + ")");
            channels += d.local->ne[2];
            blk.layers.push_back(d);
        }
        blk.transit_bn = bn("xvector.transit" + std::to_string(b) + ".nonlinear.batchnorm", channels);
        blk.transit_w = ts("xvector.transit" + std::to_string(b) + ".linear.weight", {1, channels, -1});
        if (blk.transit_w->ne[1] != channels) throw ModelError(bad + "transit" + std::to_string(b) + ")");
        channels = blk.transit_w->ne[2];
        blocks_.push_back(std::move(blk));
    }
    if (blocks_.empty()) throw ModelError(mf.path() + ": no CAMPPlus dense blocks in the model file");
    out_bn_ = bn("xvector.out_nonlinear.batchnorm", channels);
    dense_w_ = ts("xvector.dense.linear.weight", {1, 2 * channels, mf.get_int("chatterbox.campplus.embed_dim")});
    dense_bn_ = bn("xvector.dense.nonlinear.batchnorm", dense_w_->ne[2]);
    embed_dim_ = static_cast<int>(dense_w_->ne[2]);
    if (dense_w_->ne[1] != 2 * channels || embed_dim_ != mf.get_int("chatterbox.campplus.embed_dim"))
        throw ModelError(bad + "dense layer)");

    // The unbiased std of the statistics pooling needs two frames after the TDNN.
    min_frames_ = tdnn_stride_ + static_cast<int>(tdnn_w_->ne[0]) - 2 * tdnn_pad_;
    if (min_frames_ < 1) min_frames_ = 1;
    const int win = static_cast<int>(mf.get_int("chatterbox.fb.kaldi_80.win"));
    const int hop = static_cast<int>(mf.get_int("chatterbox.fb.kaldi_80.hop"));
    min_samples_ = win + (min_frames_ - 1) * hop;
}

// FCM: x ne [T, F] -> [T, C_head * F'] (channel index c * F' + f, the reference's reshape).
ggml_tensor* CampPlus::head(ggml_context* ctx, ggml_tensor* x) const {
    x = ggml_reshape_3d(ctx, x, x->ne[0], x->ne[1], 1);
    x = ggml_relu(ctx, bn_apply(ctx, conv2d(ctx, x, head_conv1_, 1), head_bn1_.scale, head_bn1_.shift, 2));
    for (const ResBlock& r : head_blocks_) {
        ggml_tensor* y = ggml_relu(ctx, bn_apply(ctx, conv2d(ctx, x, r.conv1, r.stride), r.bn1.scale, r.bn1.shift, 2));
        y = bn_apply(ctx, conv2d(ctx, y, r.conv2, 1), r.bn2.scale, r.bn2.shift, 2);
        ggml_tensor* sc = r.sc_conv ? bn_apply(ctx, conv2d(ctx, x, r.sc_conv, r.stride), r.sc_bn.scale, r.sc_bn.shift, 2) : x;
        x = ggml_relu(ctx, ggml_add(ctx, y, sc));
    }
    x = ggml_relu(ctx, bn_apply(ctx, conv2d(ctx, x, head_conv2_, head_out_stride_), head_bn2_.scale, head_bn2_.shift, 2));
    return ggml_reshape_2d(ctx, x, x->ne[0], x->ne[1] * x->ne[2]);
}

// CAMDenseTDNNLayer on x [C_in, T] -> its new channels [growth, T]:
// BN-ReLU-1x1 conv-BN-ReLU, then CAMLayer: a dilated local conv masked by
// sigmoid(linear2(relu(linear1(mean over T + mean over the frame's 100-frame segment)))).
// `pool` [T, S + 1] holds each segment's averaging weights, then 1/T for the mean;
// linear1/linear2 run once per segment, the mask is then spread to the segment's frames.
ggml_tensor* CampPlus::dense_layer(ggml_context* ctx, ggml_tensor* x, const DenseLayer& l, int dilation,
                                   ggml_tensor* pool, ggml_tensor* seg_ids) const {
    ggml_tensor* h = ggml_relu(ctx, bn_apply(ctx, x, l.bn1.scale, l.bn1.shift, 0));
    h = ggml_relu(ctx, bn_apply(ctx, pointwise(ctx, l.lin1, h), l.bn2.scale, l.bn2.shift, 0));  // [bn, T]
    ggml_tensor* ht = ggml_cont(ctx, ggml_transpose(ctx, h));                                      // [T, bn]

    const int pad = static_cast<int>((l.local->ne[0] - 1) / 2) * dilation;
    ggml_tensor* y = conv1d(ctx, ht, l.local, nullptr, 1, pad, dilation);  // [T, growth]

    const int64_t n_seg = pool->ne[1] - 1;
    ggml_tensor* pooled = ggml_mul_mat(ctx, ht, pool);  // [bn, S + 1]
    ggml_tensor* context = ggml_add(ctx, ggml_view_2d(ctx, pooled, pooled->ne[0], n_seg, pooled->nb[1], 0),
                                    ggml_view_2d(ctx, pooled, pooled->ne[0], 1, pooled->nb[1], n_seg * pooled->nb[1]));
    ggml_tensor* c = ggml_relu(ctx, ggml_add(ctx, pointwise(ctx, l.cam1_w, context), l.cam1_b));
    ggml_tensor* mask = ggml_sigmoid(ctx, ggml_add(ctx, pointwise(ctx, l.cam2_w, c), l.cam2_b));  // [growth, S]
    mask = ggml_get_rows(ctx, mask, seg_ids);                                                      // [growth, T]
    return ggml_mul(ctx, ggml_cont(ctx, ggml_transpose(ctx, y)), mask);
}

std::vector<float> CampPlus::embed(const std::vector<float>& wav16k) {
    if (static_cast<int64_t>(wav16k.size()) < min_samples_)
        throw EngineError("audio too short for the speaker embedding (" + std::to_string(wav16k.size()) +
                          " samples at 16 kHz, need at least " + std::to_string(min_samples_) + ")");
    return embed_fbank(fbank_.compute(wav16k));
}

std::vector<float> CampPlus::embed_fbank(std::vector<float> fbank) {
    const int64_t n_frames = static_cast<int64_t>(fbank.size()) / n_mels_;
    if (n_frames < min_frames_ || static_cast<int64_t>(fbank.size()) != n_frames * n_mels_)
        throw EngineError("fbank too short for the speaker embedding (" + std::to_string(n_frames) +
                          " frames, need at least " + std::to_string(min_frames_) + ")");

    // extract_feature: subtract each bin's mean over time; lay the result out time-fastest.
    std::vector<float> x(fbank.size());
    for (int m = 0; m < n_mels_; ++m) {
        double sum = 0.0;
        for (int64_t t = 0; t < n_frames; ++t) sum += fbank[t * n_mels_ + m];
        const float mean = static_cast<float>(sum / n_frames);
        for (int64_t t = 0; t < n_frames; ++t) x[m * n_frames + t] = fbank[t * n_mels_ + m] - mean;
    }

    // Frames after the TDNN, their segments, and the pooling weights of CAMLayer's context:
    // avg_pool1d(ceil_mode=True) divides the last, partial segment by its own length.
    const int64_t frames = (n_frames + 2 * tdnn_pad_ - tdnn_w_->ne[0]) / tdnn_stride_ + 1;
    const int64_t n_seg = (frames + seg_len_ - 1) / seg_len_;
    std::vector<float> pool(static_cast<size_t>(frames * (n_seg + 1)), 0.0f);
    std::vector<int32_t> seg_ids(frames);
    for (int64_t t = 0; t < frames; ++t) {
        const int64_t s = t / seg_len_;
        const int64_t len = std::min<int64_t>(seg_len_, frames - s * seg_len_);
        seg_ids[t] = static_cast<int32_t>(s);
        pool[s * frames + t] = 1.0f / static_cast<float>(len);
        pool[n_seg * frames + t] = 1.0f / static_cast<float>(frames);
    }

    std::lock_guard<std::mutex> lock(mutex_);
    ggml_context* ctx = runner_.begin();
    GraphInputs in;
    ggml_tensor* feat = in.f32(ctx, std::move(x), n_frames, n_mels_);
    ggml_tensor* pool_t = in.f32(ctx, std::move(pool), frames, n_seg + 1);
    ggml_tensor* seg_t = in.ids(ctx, std::move(seg_ids));

    ggml_tensor* h = conv1d(ctx, head(ctx, feat), tdnn_w_, nullptr, tdnn_stride_, tdnn_pad_);  // [T', C]
    h = ggml_relu(ctx, bn_apply(ctx, ggml_cont(ctx, ggml_transpose(ctx, h)), tdnn_bn_.scale, tdnn_bn_.shift, 0));
    for (const Block& b : blocks_) {
        for (const DenseLayer& l : b.layers) h = ggml_concat(ctx, h, dense_layer(ctx, h, l, b.dilation, pool_t, seg_t), 0);
        h = pointwise(ctx, b.transit_w, ggml_relu(ctx, bn_apply(ctx, h, b.transit_bn.scale, b.transit_bn.shift, 0)));
    }
    h = ggml_relu(ctx, bn_apply(ctx, h, out_bn_.scale, out_bn_.shift, 0));  // [C, T']

    // Statistics pooling: mean and unbiased std over time, then the dense layer + BN.
    ggml_tensor* ht = ggml_cont(ctx, ggml_transpose(ctx, h));  // [T', C]
    ggml_tensor* mean = ggml_mean(ctx, ht);                    // [1, C]
    ggml_tensor* dev = ggml_sub(ctx, ht, mean);
    ggml_tensor* var = ggml_scale(ctx, ggml_sum_rows(ctx, ggml_sqr(ctx, dev)), 1.0f / static_cast<float>(frames - 1));
    ggml_tensor* stats = ggml_concat(ctx, ggml_reshape_1d(ctx, mean, mean->ne[1]),
                                     ggml_reshape_1d(ctx, ggml_sqrt(ctx, var), var->ne[1]), 0);  // [2C]
    ggml_tensor* out = bn_apply(ctx, pointwise(ctx, dense_w_, stats), dense_bn_.scale, dense_bn_.shift, 0);
    return runner_.compute(out, in);
}

}  // namespace cbs
