#include "text/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <unordered_map>

#include "util/error.h"

namespace rlcpp {

size_t utf8_char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xe) return 3;
  if ((lead >> 3) == 0x1e) return 4;
  return 1;
}

char32_t utf8_next(std::string_view text, size_t* pos) {
  utf8proc_int32_t cp = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + *pos),
                                  static_cast<utf8proc_ssize_t>(text.size() - *pos), &cp);
  if (n <= 0) {
    *pos += 1;
    return 0xFFFD;
  }
  *pos += static_cast<size_t>(n);
  return static_cast<char32_t>(cp);
}

void utf8_append(char32_t cp, std::string* out) {
  utf8proc_uint8_t buffer[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buffer);
  out->append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

size_t utf8_valid_prefix(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    utf8proc_int32_t cp = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(bytes.data() + pos),
                                    static_cast<utf8proc_ssize_t>(bytes.size() - pos), &cp);
    if (n <= 0) break;
    pos += static_cast<size_t>(n);
  }
  return pos;
}

bool utf8_incomplete_tail(std::string_view bytes, size_t from) {
  if (from >= bytes.size()) return false;
  const unsigned char lead = static_cast<unsigned char>(bytes[from]);
  const size_t need = utf8_char_length(lead);
  if (need == 1 || bytes.size() - from >= need) return false;
  for (size_t i = from + 1; i < bytes.size(); ++i) {
    if ((static_cast<unsigned char>(bytes[i]) & 0xc0) != 0x80) return false;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  // Each maximal invalid subpart becomes one U+FFFD (Unicode's recommended practice, as Rust's
  // String::from_utf8_lossy): a valid lead byte followed by fitting continuation bytes that stop
  // short of a character counts once.
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t valid = utf8_valid_prefix(bytes.substr(pos));
    out.append(bytes.substr(pos, valid));
    pos += valid;
    if (pos >= bytes.size()) break;
    const unsigned char lead = static_cast<unsigned char>(bytes[pos]);
    const size_t need = utf8_char_length(lead);
    size_t k = 1;
    if (need > 1 && lead >= 0xC2 && lead <= 0xF4) {
      // Allowed range of the second byte, which excludes overlongs and surrogates.
      unsigned char lo = 0x80, hi = 0xBF;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
      while (k < need && pos + k < bytes.size()) {
        const unsigned char c = static_cast<unsigned char>(bytes[pos + k]);
        if (k == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) break;
        ++k;
      }
    }
    utf8_append(0xFFFD, &out);
    pos += k;
  }
  return out;
}

std::string unicode_normalize(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* result = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &result,
                              static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(text);  // invalid UTF-8: leave as is, the byte-level model copes
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  return std::string(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

std::string unicode_lowercase(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) utf8_append(utf8proc_tolower(utf8_next(text, &pos)), &out);
  return out;
}

bool is_unicode_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(char32_t cp) {
  if (cp == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

const std::array<char32_t, 256>& byte_to_char() {
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to 256 + n.
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    }
    return t;
  }();
  return table;
}

int char_to_byte(char32_t cp) {
  static const std::unordered_map<char32_t, int> reverse = [] {
    std::unordered_map<char32_t, int> r;
    for (int b = 0; b < 256; ++b) r[byte_to_char()[b]] = b;
    return r;
  }();
  auto it = reverse.find(cp);
  return it == reverse.end() ? -1 : it->second;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  static const std::array<std::string, 256> encoded = [] {
    std::array<std::string, 256> e;
    for (int b = 0; b < 256; ++b) utf8_append(byte_to_char()[b], &e[b]);
    return e;
  }();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += encoded[b];
  return out;
}

}  // namespace rlcpp
