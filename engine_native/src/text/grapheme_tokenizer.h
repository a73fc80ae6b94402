// The Multilingual (MTL) text front end: chatterbox.mtl_tts.punc_norm and
// chatterbox.models.tokenizers.MTLTokenizer (chatterbox-tts 0.1.7), exact.
//
//   normalize(text, lang)  = str.lower() (full mapping, Final_Sigma) -> NFKD (Unicode 14,
//                            generated tables) -> the language step: zh = Cangjie (table from
//                            the GGUF; no segmenter, as the reference without spacy_pkuseg),
//                            ko = Hangul formula + str.strip(); ja/he/ru: unchanged here
//                            (ja is a Python hook, pykakasi; he and ru are no-ops in 0.1.7)
//   encode(pre, lang)      = "[lang]" prefix -> ' ' -> "[SPACE]" -> added tokens split out
//                            (leftmost-longest, non-normalized before normalized) -> HF
//                            Whitespace pre-tokenizer (\w+|[^\w\s]+) -> character BPE by merge
//                            rank, unknown characters -> [UNK]
// The language step runs on an exact `lang` ("zh"), the tag on its lower-case, as the
// reference does. No SOT/EOT are added.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/model_file.h"

namespace cbs {

namespace mtl_text {
std::string py_lower(const std::string& utf8);   // Python str.lower()
std::string nfkd(const std::string& utf8);       // unicodedata.normalize("NFKD", s)
std::string korean_normalize(const std::string& utf8);
}  // namespace mtl_text

class GraphemeTokenizer {
public:
    // Reads tokenizer.ggml.tokens/token_type, chatterbox.tokenizer.*, chatterbox.added_tokens.*
    // and chatterbox.cangjie.*; throws ModelError on a file without them.
    explicit GraphemeTokenizer(const ModelFile& model);

    std::string normalize(const std::string& utf8, const std::string& lang) const;
    std::vector<int32_t> encode(const std::string& preprocessed, const std::string& lang) const;
    // The Cangjie step alone (what normalize applies for lang == "zh").
    std::string cangjie(const std::string& utf8) const;

    size_t vocab_size() const { return tokens_.size(); }
    int32_t start_id() const { return start_id_; }
    int32_t stop_id() const { return stop_id_; }
    size_t cangjie_size() const { return word2cj_.size(); }
    const std::vector<std::string>& languages() const { return languages_; }
    const std::string& token(int32_t id) const;

private:
    struct Added {
        std::string content;
        int32_t id;
        bool normalized;
    };
    struct Piece {
        size_t begin, end;
        int32_t added_id;  // -1: ordinary text
    };
    void split_added(const std::string& s, std::vector<Piece>& pieces, bool normalized_pass) const;
    void bpe_word(const std::string& s, size_t begin, size_t end, std::vector<int32_t>& out) const;

    std::vector<std::string> tokens_;
    std::unordered_map<std::string, int32_t> vocab_;
    std::vector<Added> added_;
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (a, b) -> (rank, merged id)
    std::unordered_map<std::string, std::string> word2cj_;              // glyph -> code (last wins)
    std::unordered_map<std::string, int32_t> cj_index_;                 // glyph -> index in cj2word[code]
    std::vector<std::string> languages_;
    int32_t unk_id_ = -1, start_id_ = -1, stop_id_ = -1;
};

}  // namespace cbs
