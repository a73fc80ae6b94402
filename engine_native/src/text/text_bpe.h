// GPT-2 byte-level BPE tokenizer with added tokens, read from a model's GGUF metadata.
// Matches the snapshot's Hugging Face tokenizer (tokenizers-backed GPT2 tokenizer,
// add_prefix_space=false, no BOS/EOS added): added tokens are split out first
// (leftmost-longest, non-normalized tokens before normalized ones, honouring
// lstrip/rstrip/single_word), the rest is pre-tokenised with the GPT-2 regex and
// each piece is byte-level BPE encoded.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/model_file.h"

namespace cbs {

class Gpt2Tokenizer {
public:
    // Reads tokenizer.ggml.* and chatterbox.added_tokens.*; throws EngineError on malformed metadata.
    explicit Gpt2Tokenizer(const ModelFile& model);

    // Token ids of UTF-8 text. Bytes that are not valid UTF-8 never throw: each such
    // byte is its own non-letter, non-number, non-space character for the
    // pre-tokeniser and is encoded through the byte-level alphabet.
    std::vector<int32_t> encode(const std::string& utf8) const;

    // The bytes the ids stand for (added tokens as their text). May be invalid UTF-8
    // when the ids split a multi-byte character. Throws EngineError on an id out of range.
    std::string decode(const std::vector<int32_t>& ids) const;

    size_t vocab_size() const { return tokens_.size(); }
    int32_t bos_id() const { return bos_id_; }
    int32_t eos_id() const { return eos_id_; }

    // The pre-tokeniser on its own (byte ranges [start, end) of `utf8`), for tests.
    std::vector<std::pair<size_t, size_t>> pretokenize(const std::string& utf8) const;

private:
    struct Added {
        std::string content;
        int32_t id;
        bool special, lstrip, rstrip, normalized, single_word;
    };
    struct Piece {
        size_t begin, end;  // bytes of the input
        int32_t added_id;   // -1: ordinary text
    };

    void split_added(const std::string& s, std::vector<Piece>& pieces, bool normalized_pass) const;
    void bpe(const std::string& s, size_t begin, size_t end, std::vector<int32_t>& out) const;

    std::vector<std::string> tokens_;
    std::vector<int32_t> token_types_;
    std::vector<Added> added_;
    std::unordered_map<int32_t, size_t> added_index_;             // id -> added_
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left id, right id) -> (rank, merged id)
    int32_t byte_token_[256];       // id of the one-byte token for each byte
    uint32_t byte_to_cp_[256];      // GPT-2 bytes_to_unicode
    std::unordered_map<uint32_t, uint8_t> cp_to_byte_;
    int32_t bos_id_ = -1, eos_id_ = -1;
};

}  // namespace cbs
