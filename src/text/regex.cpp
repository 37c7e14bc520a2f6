#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/unicode.h"
#include "util/error.h"

namespace rlcpp {

namespace {
pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }
}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw_user_error("{}: regex {} does not compile at offset {}: {}", where, pattern, offset,
                     reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(as_code(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  // Invalid UTF-8 cannot be handed to PCRE2 in UTF mode; callers pass normalised valid text, and
  // anything else is matched on its valid prefix only as one unmatched tail.
  const size_t valid = utf8_valid_prefix(text);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(as_code(code_), nullptr);
  size_t start = 0;
  while (start <= valid) {
    const int rc = pcre2_match(as_code(code_), reinterpret_cast<PCRE2_SPTR>(text.data()), valid, start,
                               PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or a resource limit: no further matches
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
    } else {
      if (begin >= valid) break;
      start = begin + utf8_char_length(static_cast<unsigned char>(text[begin]));
    }
  }
  pcre2_match_data_free(data);
  return matches;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace rlcpp

namespace rlcpp {

std::string pattern_from_json(const nlohmann::json& json, const std::string& where) {
  if (json.is_object() && json.contains("Regex") && json["Regex"].is_string()) return json["Regex"].get<std::string>();
  if (json.is_object() && json.contains("String") && json["String"].is_string()) {
    return regex_escape(json["String"].get<std::string>());
  }
  throw_user_error("{}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", where, json.dump());
}

}  // namespace rlcpp
