// UTF-8 and Unicode helpers for the tokenizer: code point iteration, normalisation forms
// (utf8proc), character classes, and GPT-2's byte-level alphabet (each byte ↔ one printable char).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace rlcpp {

// Length in bytes of the UTF-8 sequence starting with `lead` (1 for an invalid lead byte).
size_t utf8_char_length(unsigned char lead);
// Decodes the code point at `text[pos]`, advancing `pos`; invalid bytes give U+FFFD and advance 1.
char32_t utf8_next(std::string_view text, size_t* pos);
void utf8_append(char32_t cp, std::string* out);
// Length of the longest prefix of `bytes` that is complete, valid UTF-8.
size_t utf8_valid_prefix(std::string_view bytes);
// True if `bytes` ends in a sequence that is a valid but incomplete start (more bytes may finish it).
bool utf8_incomplete_tail(std::string_view bytes, size_t from);
// Replaces every invalid UTF-8 sequence by U+FFFD (as Rust's from_utf8_lossy does).
std::string utf8_lossy(std::string_view bytes);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string unicode_normalize(std::string_view text, NormalForm form);
std::string unicode_lowercase(std::string_view text);

bool is_unicode_whitespace(char32_t cp);  // Rust's char::is_whitespace
bool is_word_char(char32_t cp);           // letters, marks, digits, connector punctuation (regex \w)

// GPT-2 byte-level alphabet: byte b ↔ code point byte_to_char()[b].
const std::array<char32_t, 256>& byte_to_char();
// The byte for a byte-level code point, or -1 when the code point is not in the alphabet.
int char_to_byte(char32_t cp);
// Maps raw bytes to their byte-level string (UTF-8 of the mapped code points).
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace rlcpp
