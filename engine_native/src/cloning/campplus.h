// CAMPPlus, S3Gen's x-vector speaker encoder (the voice's 192-d `embedding`), as
// `S3Gen.embed_ref` computes it: `speaker_encoder.inference([wav16k])` = Kaldi 80-bin
// fbank -> mean subtraction over time -> FCM Conv2d head -> TDNN -> three CAM dense
// blocks with transit layers -> BN+ReLU -> mean/std statistics pooling -> dense + BN.
// One ggml graph in f32; every BatchNorm arrives folded into (scale, shift).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "cloning/audio_features.h"
#include "core/graph_runner.h"
#include "core/model_file.h"

namespace cbs {

class CampPlus {
public:
    CampPlus(const ModelFile& mf, ggml_backend_t backend);

    // wav at 16 kHz -> the x-vector [embed_dim]. Throws EngineError when the audio is
    // too short for the network (the statistics pooling needs two frames after the TDNN).
    std::vector<float> embed(const std::vector<float>& wav16k);
    // The same from an already computed fbank, row-major [n_frames][n_mels], before the
    // mean subtraction (embed = embed_fbank(fbank(wav))).
    std::vector<float> embed_fbank(std::vector<float> fbank);

    int embed_dim() const { return embed_dim_; }
    int min_samples() const { return min_samples_; }

private:
    struct Bn {
        ggml_tensor *scale, *shift;
    };
    struct ResBlock {  // FCM BasicResBlock
        ggml_tensor *conv1, *conv2, *sc_conv;  // sc_conv null: identity shortcut
        Bn bn1, bn2, sc_bn;
        int stride;  // along frequency
    };
    struct DenseLayer {  // CAMDenseTDNNLayer
        Bn bn1, bn2;
        ggml_tensor *lin1, *local, *cam1_w, *cam1_b, *cam2_w, *cam2_b;
    };
    struct Block {  // CAMDenseTDNNBlock + its TransitLayer
        std::vector<DenseLayer> layers;
        int dilation;
        Bn transit_bn;
        ggml_tensor* transit_w;
    };

    ggml_tensor* head(ggml_context* ctx, ggml_tensor* x) const;
    ggml_tensor* dense_layer(ggml_context* ctx, ggml_tensor* x, const DenseLayer& l, int dilation, ggml_tensor* pool,
                             ggml_tensor* seg_ids) const;

    KaldiFbank fbank_;
    int n_mels_, embed_dim_, seg_len_, tdnn_stride_, tdnn_pad_, head_out_stride_, min_frames_, min_samples_;
    ggml_tensor *head_conv1_, *head_conv2_, *tdnn_w_, *dense_w_;
    Bn head_bn1_, head_bn2_, tdnn_bn_, out_bn_, dense_bn_;
    std::vector<ResBlock> head_blocks_;
    std::vector<Block> blocks_;
    GraphRunner runner_;
    std::mutex mutex_;  // one computation at a time through runner_
};

}  // namespace cbs
