// Punctuation normalisation applied to user text before tokenising: the Turbo / Nano
// reference's and the Multilingual reference's, one procedure with two rule sets.
#pragma once

#include <string>

namespace cbs {

// chatterbox.tts_turbo.punc_norm, with Python's string semantics: empty text gives
// the reference's prompt message; a lower-case first character is upper-cased
// (str.islower / str.upper, full Unicode 14 tables, e.g. 'ß' -> "SS"); runs of
// Unicode whitespace (str.split) collapse to one space and the ends are trimmed;
// the reference replacement list is applied in order; trailing spaces are
// removed and '.' is appended unless the text ends in . ! ? - or ,.
// Bytes that are not valid UTF-8 pass through unchanged (never case-mapped).
std::string punc_norm(const std::string& utf8);

// chatterbox.mtl_tts.punc_norm: the same steps with the Multilingual lists ("...", " - ",
// ";" replaced too; the CJK full stops and commas also end a sentence).
std::string punc_norm_mtl(const std::string& utf8);

// Every occurrence of `from` in s replaced by `to`, left to right (Python's str.replace).
void replace_all(std::string& s, const std::string& from, const std::string& to);

}  // namespace cbs
