#include "t3/t3_hparams.h"

namespace cbs {

T3Hparams T3Hparams::from(const ModelFile& mf) {
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(std::string("chatterbox.t3.") + k)); };
    T3Hparams hp;
    hp.arch = mf.get_string("chatterbox.t3.arch");
    hp.n_layer = i("n_layer");
    hp.n_embd = i("n_embd");
    hp.n_head = i("n_head");
    hp.n_ff = i("n_ff");
    hp.text_vocab = i("text_vocab");
    hp.speech_vocab = i("speech_vocab");
    hp.speaker_embed_size = i("speaker_embed_size");
    hp.start_speech_token = i("start_speech_token");
    hp.stop_speech_token = i("stop_speech_token");
    if (hp.arch == "llama") {
        // Positions are bounded by the learned tables, not by a context key: the
        // conditioning (speaker, perceiver queries, emotion), the text table, the start
        // token twice and one speech position per table row.
        hp.ln_eps = static_cast<float>(mf.get_float("chatterbox.t3.rms_eps"));
        hp.n_ctx = 2 + i("perceiver.n_query") + i("text_pos_len") + 1 + i("speech_pos_len");
        if (hp.n_head > 0 && i("head_dim") * hp.n_head != hp.n_embd)
            throw ModelError(mf.path() + ": T3 head_dim x n_head differs from n_embd (not supported)");
    } else {
        hp.ln_eps = static_cast<float>(mf.get_float("chatterbox.t3.ln_eps"));
        hp.n_ctx = i("n_ctx");
    }
    if (hp.n_layer <= 0 || hp.n_head <= 0 || hp.n_embd <= 0 || hp.n_embd % hp.n_head != 0 || hp.n_ff <= 0 ||
        hp.n_ctx <= 0 || hp.text_vocab <= 0 || hp.speech_vocab <= 0 || hp.speaker_embed_size <= 0 ||
        hp.start_speech_token < 0 || hp.start_speech_token >= hp.speech_vocab || hp.stop_speech_token < 0 ||
        hp.stop_speech_token >= hp.speech_vocab)
        throw ModelError(mf.path() + ": inconsistent T3 dimensions");
    return hp;
}

}  // namespace cbs
