// T3's dimensions (every one from the GGUF's chatterbox.t3.* metadata) and what T3 is
// conditioned on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model_file.h"

namespace cbs {

struct T3Hparams {
    std::string arch;  // chatterbox.t3.arch: which T3Model implementation runs the file
    int n_layer = 0, n_embd = 0, n_head = 0, n_ff = 0, n_ctx = 0;
    int text_vocab = 0, speech_vocab = 0, speaker_embed_size = 0;
    int start_speech_token = 0, stop_speech_token = 0;
    float ln_eps = 1e-5f;  // LayerNorm (gpt2) or RMSNorm (llama) epsilon
    int head_dim() const { return n_embd / n_head; }
    static T3Hparams from(const ModelFile& mf);
};

// What T3 is conditioned on: the voice's speaker embedding and prompt speech tokens, and
// for the Multilingual T3 the exaggeration (its emotion token) and whether classifier-free
// guidance runs (a second, unconditional row: the text's token embeddings zeroed). The
// GPT-2 T3 reads neither of the last two.
struct T3Conditioning {
    std::vector<float> speaker_emb;
    std::vector<int32_t> prompt_tokens;
    float exaggeration = 0.5f;
    bool guidance = false;
    // The keys and values of the conditioning prefix depend on these (not on guidance:
    // the prefix is the same in both rows).
    bool operator==(const T3Conditioning& o) const {
        return speaker_emb == o.speaker_emb && prompt_tokens == o.prompt_tokens && exaggeration == o.exaggeration;
    }
    bool operator!=(const T3Conditioning& o) const { return !(*this == o); }
};

}  // namespace cbs
