// Punctuation normalisation applied to user text before tokenising.
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

}  // namespace cbs
